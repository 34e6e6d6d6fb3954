"""Shared pytest setup: the `gpu` marker (GPU tests skip without CUDA) and the `backend`
parameter of GPU tests.

FLASHCUTE_TEST_BACKENDS (comma-separated, e.g. "sm80,sm90" or "auto") chooses the backends GPU
tests run; by default every backend the library supports on this device, among sm80 and sm90.
"""
import os

import pytest


def _cuda_available():
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def selected_backends():
    env = os.environ.get("FLASHCUTE_TEST_BACKENDS")
    if env:
        return [b.strip() for b in env.split(",") if b.strip()]
    if not _cuda_available():
        return ["auto"]
    import torch
    import flashcute

    hdims = flashcute.build_info()["head_dims"] or [128]
    found = []
    for b in ("sm80", "sm90"):
        for dt in (torch.bfloat16, torch.float16):
            if flashcute.supported(torch.cuda.current_device(), b, dt, hdims[0]):
                found.append(b)
                break
    return found or ["auto"]





def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", selected_backends())
