"""CPU helper for torch.compile tests: the FX graph dynamo captures for a function, without
running it (the recording backend raises instead of executing, so CPU tensors can stand in for
CUDA ones)."""
import pytest
import torch


class _Captured(Exception):
    pass


def captured_graph_code(f, *args, no_grad=False):
    """The code of the single graph torch.compile(f, fullgraph=True) captures for args."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)

        def run(*a):
            raise _Captured()
        return run

    torch._dynamo.reset()
    try:
        with pytest.raises(_Captured):
            if no_grad:
                with torch.no_grad():
                    torch.compile(f, fullgraph=True, backend=backend)(*args)
            else:
                torch.compile(f, fullgraph=True, backend=backend)(*args)
        return graphs[0].code
    finally:
        torch._dynamo.reset()
