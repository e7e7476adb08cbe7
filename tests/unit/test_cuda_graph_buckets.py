"""Pure bucket and padding logic of the CUDA-graph runner (no GPU needed)."""
import pytest
from hypothesis import given, strategies as st

from nanoserve.engine.cuda_graph import bucket_for, decode_buckets, pad_decode_inputs


def test_bucket_grid():
    assert decode_buckets(1) == [1]
    assert decode_buckets(3) == [1, 2, 3]
    assert decode_buckets(8) == [1, 2, 4, 8]
    assert decode_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert decode_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert decode_buckets(256)[-3:] == [224, 240, 256]
    assert decode_buckets(1000)[-1] == 512
    assert decode_buckets(1000, max_bucket=40) == [1, 2, 4, 8, 16, 32, 40]


@given(st.integers(1, 2000), st.integers(1, 600))
def test_grid_properties(max_num_seqs, max_bucket):
    b = decode_buckets(max_num_seqs, max_bucket)
    assert b == sorted(set(b))
    assert b[0] == 1 and b[-1] == min(max_num_seqs, max_bucket)
    assert all(x in (1, 2, 4, 8) or x % 16 == 0 for x in b[:-1])


@given(st.integers(1, 300), st.integers(1, 400))
def test_bucket_for_is_smallest_fit(max_num_seqs, n):
    buckets = decode_buckets(max_num_seqs)
    got = bucket_for(n, buckets)
    if n > buckets[-1]:
        assert got is None
    else:
        assert got >= n and all(b < n for b in buckets if b < got)


@pytest.mark.parametrize("bad", [0, -3])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        decode_buckets(bad)
    with pytest.raises(ValueError):
        bucket_for(bad, [1, 2])
    with pytest.raises(TypeError):
        decode_buckets(2.0)


def test_padding_lanes_write_nowhere_and_read_block_zero():
    p = pad_decode_inputs([5, 6], [9, 3], [41, 13], [10, 4], [[2, 3], [1, -1]], bucket=4, table_width=3)
    assert p.input_ids == [5, 6, 0, 0]
    assert p.positions == [9, 3, 0, 0]
    assert p.slot_mapping == [41, 13, -1, -1]
    assert p.context_lens == [10, 4, 1, 1]
    assert p.block_tables == [[2, 3, -1], [1, -1, -1], [0, -1, -1], [0, -1, -1]]


def test_padding_errors():
    with pytest.raises(ValueError, match="bucket"):
        pad_decode_inputs([1, 2], [0, 0], [0, 1], [1, 1], [[0], [0]], bucket=1, table_width=1)
    with pytest.raises(ValueError, match="width"):
        pad_decode_inputs([1], [0], [0], [1], [[0, 1, 2]], bucket=1, table_width=2)
    with pytest.raises(ValueError, match="one entry"):
        pad_decode_inputs([1], [0, 1], [0], [1], [[0]], bucket=2, table_width=2)


def test_full_width_table_fits():
    """A prompt of max_model_len - 1 tokens decodes: its table fills the captured width exactly."""
    max_model_len, block_size = 4096, 256
    width = -(-max_model_len // block_size)
    table = list(range(width))
    p = pad_decode_inputs([7], [max_model_len - 1], [width * block_size - 1], [max_model_len], [table], bucket=2, table_width=width)
    assert p.block_tables[0] == table
