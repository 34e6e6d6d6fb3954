"""CPU: the compiled core depends on no torch, Python or CUDA runtime library (DESIGN principle
1), and a built wheel is tagged py3-none-linux_x86_64. The ELF dynamic section is parsed here in
pure Python (no readelf needed)."""
import glob
import pathlib
import struct
import zipfile

import pytest

from flashcute import _lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DT_NEEDED, DT_STRTAB = 1, 5
PT_DYNAMIC, PT_LOAD = 2, 1


def elf_needed(path):
    data = pathlib.Path(path).read_bytes()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    assert data[4] == 2 and data[5] == 1, "expected a 64-bit little-endian ELF"
    e_phoff, = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dyn = [], None
    for i in range(e_phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, e_phoff + i * e_phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dyn = (p_offset, p_filesz)
    assert dyn is not None, "no dynamic section"
    entries, strtab = [], None
    for off in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == DT_NEEDED:
            entries.append(val)
        elif tag == DT_STRTAB:
            strtab = val
    # DT_STRTAB holds a virtual address: map it to a file offset through the PT_LOAD segments
    base = next(off + (strtab - va) for va, off, sz in loads if va <= strtab < va + sz)

    def cstr(o):
        end = data.index(b"\0", base + o)
        return data[base + o:end].decode()

    return [cstr(v) for v in entries]


def test_library_needs_no_torch_python_cudart():
    needed = elf_needed(_lib.LIBRARY_PATH)
    bad = [n for n in needed if any(s in n for s in ("torch", "c10", "python", "cudart", "libcuda.so"))]
    assert not bad, f"{_lib.LIBRARY_PATH} needs {bad} (all NEEDED: {needed})"


def test_elf_parser_agrees_with_readelf():
    import shutil
    import subprocess

    if shutil.which("readelf") is None:
        pytest.skip("readelf not found")
    outp = subprocess.run(["readelf", "-d", str(_lib.LIBRARY_PATH)], capture_output=True, text=True).stdout
    want = [line.split("[")[1].split("]")[0] for line in outp.splitlines() if "(NEEDED)" in line]
    assert elf_needed(_lib.LIBRARY_PATH) == want


def test_wheel_tag():
    wheels = sorted(glob.glob(str(ROOT / "dist" / "flashcute-*.whl")))
    if not wheels:
        pytest.skip("no wheel in dist/ (build one with `pip wheel . -w dist`)")
    for w in wheels:
        assert pathlib.Path(w).name.endswith("-py3-none-linux_x86_64.whl"), w
        with zipfile.ZipFile(w) as z:
            names = z.namelist()
            assert "flashcute/libflashcute.so" in names and "flashcute/_lib.py" in names, names
            libs = [n for n in names if "libflashcute" in n]
            assert libs == ["flashcute/libflashcute.so"], f"the library once, no versioned copies: {libs}"
            meta = next(n for n in names if n.endswith(".dist-info/WHEEL"))
            assert "Tag: py3-none-linux_x86_64" in z.read(meta).decode()


def elf_exported_symbols(path):
    """Names of the defined global/weak symbols in .dynsym (what a loader can bind to)."""
    data = pathlib.Path(path).read_bytes()
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    names = []
    for _, sh_type, _, _, off, size, link, _, _, entsize in sections:
        if sh_type != 11:  # SHT_DYNSYM
            continue
        str_off = sections[link][4]
        for s in range(off + entsize, off + size, entsize):  # entry 0 is the null symbol
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, s)
            if st_shndx == 0 or (st_info >> 4) not in (1, 2):  # undefined, or local
                continue
            end = data.index(b"\0", str_off + st_name)
            names.append(data[str_off + st_name:end].decode())
    return names


def test_library_exports_only_the_c_abi():
    # The static libstdc++/cudart inside must stay private (-Wl,--exclude-libs,ALL): exported
    # copies could be bound by, or bind to, another C++ runtime in the same process.
    names = elf_exported_symbols(_lib.LIBRARY_PATH)
    assert "flashcute_fwd" in names and "flashcute_last_error" in names
    foreign = sorted(n for n in names if not n.startswith("flashcute_"))
    assert not foreign, f"{len(foreign)} non-ABI symbols exported, e.g. {foreign[:5]}"


def test_installed_wheel_tag():
    # `pip install .` builds a wheel and keeps its WHEEL file in the installed dist-info: the tag
    # that was installed is py3-none (one wheel for every Python and torch).
    import importlib.metadata as md

    try:
        dist = md.distribution("flashcute")
    except md.PackageNotFoundError:
        pytest.skip("flashcute is not installed (running from a source tree via FLASHCUTE_LIBRARY)")
    wheel = dist.read_text("WHEEL")
    if wheel is None:
        pytest.skip("installed without a WHEEL file (not from a wheel)")
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    assert tags == ["py3-none-linux_x86_64"], tags


def test_installed_library_once():
    """The installed package holds the library once: no versioned copy beside it (a wheel carries
    no symlinks, so a CMake VERSION turned into a second 30 MB file)."""
    import importlib.metadata as md

    try:
        dist = md.distribution("flashcute")
    except md.PackageNotFoundError:
        pytest.skip("flashcute is not installed (running from a source tree via FLASHCUTE_LIBRARY)")
    libs = sorted(str(f) for f in (dist.files or []) if "libflashcute" in str(f))
    assert libs == ["flashcute/libflashcute.so"], libs
