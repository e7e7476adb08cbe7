"""Sequence: token bookkeeping; the prompt checks at the door (appendix A5's input processor)."""
import pytest

from nanoserve.engine.input_processor import check_prompt_ids
from nanoserve.engine.sequence import Sequence, SequenceStatus


def test_new_sequence_is_waiting_with_prompt_only():
    seq = Sequence(7, [1, 2, 3], max_tokens=4, params="p")
    assert seq.seq_id == 7 and seq.params == "p"
    assert seq.token_ids == [1, 2, 3] and seq.prompt_token_ids == [1, 2, 3]
    assert seq.output_token_ids == []
    assert (seq.num_tokens, seq.num_prompt_tokens, seq.num_output_tokens) == (3, 3, 0)
    assert seq.num_computed_tokens == 0 and seq.num_cached_tokens == 0
    assert seq.block_table == [] and seq.status is SequenceStatus.WAITING
    assert seq.finish_reason is None and not seq.is_finished


def test_appended_tokens_grow_output_not_prompt():
    seq = Sequence(0, [5, 6], max_tokens=3)
    seq.token_ids += [9, 10]
    assert seq.token_ids == [5, 6, 9, 10]
    assert seq.prompt_token_ids == [5, 6] and seq.output_token_ids == [9, 10]
    assert seq.num_tokens == 4 and seq.num_output_tokens == 2


def test_prompt_is_copied_from_caller():
    prompt = [1, 2]
    seq = Sequence(0, prompt, max_tokens=1)
    seq.token_ids.append(3)
    assert prompt == [1, 2]


@pytest.mark.parametrize("bad, err", [([], ValueError), ("abc", TypeError), ([1, 2.0], TypeError),
                                      ([1, -1], ValueError), (None, TypeError), ([True], TypeError)])
def test_bad_prompt_rejected_at_the_door(bad, err):
    with pytest.raises(err, match="prompt_token_ids"):
        check_prompt_ids(bad, vocab_size=100)


def test_prompt_ids_within_the_vocabulary():
    assert check_prompt_ids((3, 99), vocab_size=100) == [3, 99]
    with pytest.raises(ValueError, match="token id 100 is outside the vocabulary"):
        check_prompt_ids([3, 100], vocab_size=100)
