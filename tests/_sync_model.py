"""Pieces of the CPU models of the kernels' synchronisation: an mbarrier as the hardware keeps it
(tests/test_protocol_model.py), and the exception a model raises when it sees a safety violation
(that model's and tests/test_quantize_schedule_model.py's)."""


class MBarrier:
    """A phase counter, pending arrivals and transaction bytes. Waits see only the phase's parity
    (`try_wait.parity P` returns once the phase with parity P is complete, i.e. the current
    phase's parity differs from P), so a waiter two phases behind blocks for ever."""

    def __init__(self, count):
        self.count, self.pending, self.phase, self.tx = count, count, 0, 0

    def arrive(self, tx=0):
        self.tx += tx
        self.pending -= 1
        self._complete()

    def complete_tx(self, tx):
        self.tx -= tx
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity):
        return self.phase % 2 != parity


class Violation(Exception):
    pass
