"""Exercise 09.7 (capture one decode bucket): the checker passes the solution, not the stub nor typical mistakes;
the emulated CUDA graph behaves like a real one where the exercise depends on it."""
import pytest
import torch

from course.exercises import check_exercise
from course.exercises.ch09 import EmulatedCUDA, _graphed_tokens, graph_runner_with
from course.solutions.ch09 import SOLUTIONS, WRONG

DecodeGraph = SOLUTIONS["09.7"]


class _Stub:
    def __init__(self, decode, bucket, device, pool, cuda):
        raise NotImplementedError


class _NoWarmUp(DecodeGraph):
    """A mistake: the first decode call happens inside the capture."""

    def __init__(self, decode, bucket, device, pool, cuda):
        self.ids, self.positions = (torch.zeros(bucket, dtype=torch.int64) for _ in range(2))
        self.slots = torch.full((bucket,), -1, dtype=torch.int64)
        self.graph = cuda.CUDAGraph()
        with cuda.graph(self.graph, pool=pool):
            self.out = decode(self.ids, self.positions, self.slots)


class _RebindsBuffers(DecodeGraph):
    """A mistake: the step's tensors replace the static ones, so the graph reads what it was captured with."""

    def replay(self, ids, positions, slots):
        self.ids, self.positions, self.slots = ids, positions, slots
        self.graph.replay()
        return self.out[:len(ids)]


class _RunsDecodeAgain(DecodeGraph):
    """A mistake: replay calls decode eagerly instead of the graph."""

    def __init__(self, decode, bucket, device, pool, cuda):
        super().__init__(decode, bucket, device, pool, cuda)
        self.decode = decode

    def replay(self, ids, positions, slots):
        return self.decode(ids, positions, slots)


class _OwnPool(DecodeGraph):
    """A mistake: every bucket captured into a pool of its own."""

    def __init__(self, decode, bucket, device, pool, cuda):
        super().__init__(decode, bucket, device, cuda.graph_pool_handle() + ("mine",), cuda)


def test_capture_checker_passes_the_solution_and_not_the_stub(capsys):
    check_exercise("09.7", DecodeGraph)
    assert "passed" in capsys.readouterr().out
    check_exercise("09.7", _Stub)
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out


@pytest.mark.parametrize("mistake, hint", [(WRONG["09.7"], "slot -1"), (_NoWarmUp, "warm-up"),
                                           (_RebindsBuffers, "never rebind"), (_RunsDecodeAgain, "never decode"),
                                           (_OwnPool, "pool")],
                         ids=["stale-padding", "no-warm-up", "rebinds", "eager-replay", "own-pool"])
def test_capture_checker_rejects_mistakes_with_a_hint(mistake, hint):
    with pytest.raises(AssertionError, match=hint):
        check_exercise("09.7", mistake)


def test_an_emulated_graph_replays_on_the_tensors_it_was_captured_with():
    cuda = EmulatedCUDA()
    x = torch.zeros(3)
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        y = cuda.recorded(lambda t: t * 2 + 1)(x)
    x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    graph.replay()
    assert y.tolist() == [3.0, 5.0, 7.0]
    graph.replay()  # a fresh tensor of new values is not what the graph reads
    assert y.tolist() == [3.0, 5.0, 7.0]


def test_the_engine_replays_every_decode_step_through_the_readers_graphs():
    built = []

    class Counted(DecodeGraph):
        def __init__(self, *args):
            super().__init__(*args)
            built.append(self)

    want, got, replays = _graphed_tokens(runner_class=graph_runner_with(Counted))
    assert got == want and replays > 0
    assert sorted(len(g.ids) for g in built) == [1, 2, 4, 8]
