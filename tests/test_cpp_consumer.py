"""The C++ consumer (tests/cpp/consumer) configures and builds against the installed flashcute
package with find_package(flashcute CONFIG); on a machine with a GPU it also runs one forward
and checks it against a float64 reference (exit 0), without one it reports a skip (exit 77)."""
import os
import pathlib
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CONSUMER = HERE / "cpp" / "consumer"


def _installed_prefix():
    import flashcute

    prefix = pathlib.Path(flashcute.__file__).resolve().parent
    if not (prefix / "lib" / "cmake" / "flashcute" / "flashcuteConfig.cmake").is_file():
        pytest.skip(f"flashcute at {prefix} was not installed from a wheel (no CMake package config)")
    return prefix


def _gpu_available():
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not found")
def test_cpp_consumer_builds_and_runs(tmp_path):
    prefix = _installed_prefix()
    build = tmp_path / "build"
    env = dict(os.environ)
    cfg = subprocess.run(
        ["cmake", "-S", str(CONSUMER), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"],
        capture_output=True, text=True, env=env)
    if cfg.returncode != 0 and "CUDAToolkit" in (cfg.stdout + cfg.stderr) and not _gpu_available():
        pytest.skip("no CUDA toolkit to build the consumer against")
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    bld = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, env=env)
    assert bld.returncode == 0, bld.stdout + bld.stderr
    exe = build / "flashcute_consumer"
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
    print(run.stdout)
    if _gpu_available():
        assert run.returncode == 0 and "PASS" in run.stdout, run.stdout + run.stderr
    else:
        assert run.returncode == 77, run.stdout + run.stderr
