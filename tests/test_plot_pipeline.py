"""pipeline_panels: one heatmap per stage, the current stage highlighted in each strip, clear errors."""

import matplotlib.pyplot as plt
import pytest
import torch

from transformer_steps.course.plot import pipeline_panels

STAGES = [("X", "X", torch.arange(6.0).view(3, 2)), ("FFN", "hidden", torch.ones(3, 3)),
          ("LN", "out", -torch.arange(6.0).view(3, 2))]


def test_one_heatmap_per_stage_with_its_values():
    fig = pipeline_panels(STAGES, ncols=2, decimals=1)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == ["1. X", "2. hidden", "3. out"]
    assert [ax.images[0].get_array().shape for ax in heatmaps] == [(3, 2), (3, 3), (3, 2)]
    assert "5.0" in [t.get_text() for t in heatmaps[0].texts]
    plt.close(fig)


def test_every_panel_shares_one_colour_scale_and_one_colorbar():
    fig = pipeline_panels(STAGES)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert {ax.images[0].get_clim() for ax in heatmaps} == {(-5.0, 5.0)}  # symmetric around 0, from all stages
    assert len(fig.axes) == 2 * len(STAGES) + 1  # strips, heatmaps and one colorbar
    plt.close(fig)


def test_each_strip_highlights_its_own_stage():
    fig = pipeline_panels(STAGES)
    strips = [ax for ax in fig.axes if not ax.images and ax.texts]  # not the colorbar
    bold = [[t.get_text() for t in ax.texts if t.get_fontweight() == "bold"] for ax in strips]
    assert bold == [["X"], ["FFN"], ["LN"]]
    plt.close(fig)


@pytest.mark.parametrize("stages, ncols", [([], 4), (STAGES, 0)])
def test_bad_input_raises(stages, ncols):
    with pytest.raises(ValueError):
        pipeline_panels(stages, ncols=ncols)
