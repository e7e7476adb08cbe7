"""course.ablation: chapter 15's ablation read back per idea, for the chapters that cite it."""
import pytest

from course.ablation import idea_ratios, load_ablation, median_tok_s, print_idea


def test_ladder_and_leave_one_out_ratios_come_from_one_call():
    ablation = load_ablation()
    rung = next(row for row in ablation["ladder"] if row["name"].startswith("+ fused kernels"))
    before = ablation["ladder"][ablation["ladder"].index(rung) - 1]
    r = idea_ratios("10", ablation)
    assert r["ladder"]["random"] == pytest.approx(median_tok_s(rung, "random") / median_tok_s(before, "random"))
    assert r["names"]["left_out"] == "full - fused kernels (10)" and 0 < r["loo"]["random"] < 1
    assert r["tpot_ms"]["rung"] < r["tpot_ms"]["before"]


def test_a_rung_over_a_row_of_another_call_has_no_ratio():
    r = idea_ratios("08")
    assert not r["same_call"] and set(r["ladder"].values()) == {None} and r["names"]["left_out"] is None


def test_the_idea_alone_is_preferred_when_left_out():
    assert idea_ratios("12")["names"]["left_out"] == "full - mixed-step graphs (12)"
    assert idea_ratios("09")["names"]["left_out"] == "full - all graphs (09, 12)"


def test_print_idea_names_the_session(capsys):
    print_idea("11")
    out = capsys.readouterr().out
    assert "commit 2a40bc8" in out and "high-churn 1.26x" in out and "not run" not in out


@pytest.mark.parametrize("chapter, error", [("9", ValueError), ("05", ValueError), (11, TypeError)])
def test_a_chapter_the_ablation_does_not_measure_is_refused(chapter, error):
    with pytest.raises(error, match="chapter"):
        idea_ratios(chapter)
