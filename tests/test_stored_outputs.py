"""The stored-output comparison behind the Colab simulation must catch what nbval catches and ignore what
nbval ignores."""

import copy

import nbformat
from stored_outputs import differences


def notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, outputs=outputs) for source, outputs in cells]
    return nb


def stream(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def display(**data):
    return nbformat.v4.new_output("display_data", data=data)


STORED = notebook(
    ("print(loss)", [stream("val loss 6.238\n")]),
    ("# NBVAL_IGNORE_OUTPUT\nprint(t)", [stream("0.81 ms per token\n")]),
    ("plot()", [display(**{"text/plain": "<Figure size 600x350 with 1 Axes>", "image/png": "AAAA"})]),
    ("timed()", [stream("took 12.5 s\n")]),
)


def test_identical_outputs_have_no_differences():
    assert differences(STORED, copy.deepcopy(STORED)) == []


def test_a_changed_digit_is_reported_with_its_cell():
    fresh = copy.deepcopy(STORED)
    fresh.cells[0].outputs[0]["text"] = "val loss 6.223\n"
    reports = differences(STORED, fresh)
    assert len(reports) == 1 and reports[0].startswith("code cell 0 (stdout)")
    assert "-val loss 6.238" in reports[0] and "+val loss 6.223" in reports[0]


def test_a_missing_or_extra_output_is_reported():
    fresh = copy.deepcopy(STORED)
    fresh.cells[2].outputs = []
    assert [r.split(":")[0] for r in differences(STORED, fresh)] == ["code cell 2 (text/plain)"]


def test_ignored_cells_images_and_sanitized_timings_do_not_count():
    fresh = copy.deepcopy(STORED)
    fresh.cells[1].outputs[0]["text"] = "0.93 ms per token\n"  # NBVAL_IGNORE_OUTPUT
    fresh.cells[2].outputs[0]["data"]["image/png"] = "BBBB"  # images are not compared
    fresh.cells[3].outputs[0]["text"] = "took 14.0 s\n"  # the timings sanitizer
    assert differences(STORED, fresh) == []


def test_a_folded_cell_marks_its_output_ignored_after_its_title_as_nbval_does():
    # fold() puts "# @title ..." first, so the marker is on the second line; nbval reads it on any comment line
    stored = notebook(("# @title Measure: a timing\n# NBVAL_IGNORE_OUTPUT\nprint(t)", [stream("matrix products: 69% of a step\n")]),
                      ("# @title Not ignored\nx = 1  # NBVAL_IGNORE_OUTPUT is only a word here\nprint(x)",
                       [stream("1\n")]))
    fresh = copy.deepcopy(stored)
    fresh.cells[0].outputs = [stream("matrix products: 76% of a step\n")]
    assert differences(stored, fresh) == []
    fresh.cells[1].outputs = [stream("2\n")]
    assert len(differences(stored, fresh)) == 1
