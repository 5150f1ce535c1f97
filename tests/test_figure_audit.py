"""The figure audit (tests/figure_audit.py) passes a readable figure and reports each rule an unreadable one
breaks, in a real kernel with the inline backend, as in a chapter."""

import figure_audit
import nbformat
import pytest
from nbclient import NotebookClient

READABLE = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot([0, 1, 2], [0, 1, 4], label="a")
ax.plot([0, 1, 2], [0, 2, 3], label="b")
ax.legend()
ax.set_title("readable")
plt.show()
"""

UNREADABLE = """
import numpy as np
fig, axes = plt.subplots(1, 2, figsize=(16, 4))
axes[0].plot([0, 1, 2], [0, 1, 4])
axes[0].plot([0, 1, 2], [0, 2, 3])
axes[0].text(1, 1, "tiny", fontsize=6)
axes[0].set_title("no legend")
axes[1].imshow(np.eye(3), vmin=0, vmax=1)
axes[1].imshow(np.eye(3) * 5, vmin=0, vmax=5)
plt.show()
"""


@pytest.mark.slow
def test_audit_reports_each_broken_rule_and_passes_a_readable_figure():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# setup"),
                                         nbformat.v4.new_code_cell(READABLE),
                                         nbformat.v4.new_code_cell(UNREADABLE)])
    figure_audit.instrument(nb)
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    found = figure_audit.findings(nb)
    assert len(nb.cells) == 3  # the audit's cells are gone again
    assert not [f for f in found if "'readable'" in f]
    broken = "\n".join(f for f in found if "'no legend'" in f)
    assert "text below 8 px on screen" in broken and "'tiny'" in broken
    assert "2 lines and no legend" in broken
    assert "2 images on 2 colour scales" in broken
