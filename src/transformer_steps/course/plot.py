"""Plot helpers shared by the chapters (matplotlib only; nothing from the model)."""

from __future__ import annotations

import numpy as np


def heatmap(ax, matrix, row_labels=None, col_labels=None, decimals: int | None = 2, cmap: str = "viridis",
            colorbar: bool = True, vmin=None, vmax=None, title: str | None = None):
    """imshow of a matrix with each value written in its cell (when decimals is not None)."""
    m = np.asarray(matrix.detach().cpu().float() if hasattr(matrix, "detach") else matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"heatmap needs a 2-d matrix, got shape {m.shape}")
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if row_labels is not None:
        ax.set_yticks(range(m.shape[0]), labels=row_labels)
    if col_labels is not None:
        ax.set_xticks(range(m.shape[1]), labels=col_labels)
    if decimals is not None:
        lo, hi = im.get_clim()
        for (i, j), value in np.ndenumerate(m):
            dark = (value - lo) / ((hi - lo) or 1.0) < 0.5
            ax.text(j, i, f"{value:.{decimals}f}", ha="center", va="center",
                    color="white" if dark else "black", fontsize=9)
    if colorbar:
        ax.figure.colorbar(im, ax=ax)
    if title:
        ax.set_title(title)
    return im


def loss_curves(ax, curves: dict, xlabel: str = "step", ylabel: str = "loss (nats/token)",
                title: str | None = None):
    """One line per label: curves = {label: (steps, losses)}."""
    for label, (steps, losses) in curves.items():
        ax.plot(steps, losses, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)


def pipeline_panels(stages, ncols: int = 4, decimals: int = 2, panel_size=(2.6, 2.9), title: str | None = None):
    """A computation as a strip of frames to step through: one panel per stage, each with the whole pipeline
    drawn on top (done stages grey, the current one highlighted) and that stage's matrix as a heatmap below
    (rows labelled t1, t2, ... as tokens, columns 1, 2, ... as features). All panels share one colour scale,
    symmetric around 0 and shown once, so a colour means the same value in every panel.

    stages: list of (step, title, matrix): `step` is the short name in the pipeline strip (e.g. "LN"),
    `title` the panel's caption (e.g. "H1 = LN(R1)"). Returns the figure.
    """
    import matplotlib.pyplot as plt

    if not stages:
        raise ValueError("pipeline_panels needs at least one (step, title, matrix) stage")
    if ncols < 1:
        raise ValueError(f"ncols must be >= 1, got {ncols}")
    nrows = -(-len(stages) // ncols)
    ncols = min(ncols, len(stages))
    fig = plt.figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    grid = fig.add_gridspec(2 * nrows, ncols, height_ratios=[1, 5] * nrows)
    steps = [step for step, _, _ in stages]
    values = [np.asarray(m.detach().cpu().double() if hasattr(m, "detach") else m, dtype=float) for _, _, m in stages]
    lim = max(float(np.abs(v).max()) for v in values) or 1.0
    heatmaps = []
    for k, (_, caption, matrix) in enumerate(stages):
        row, col = divmod(k, ncols)
        strip = fig.add_subplot(grid[2 * row, col])
        strip.set_axis_off()
        strip.set_xlim(-0.5, len(steps) - 0.5)
        strip.set_ylim(-1, 1)
        for i, step in enumerate(steps):
            face = "tab:orange" if i == k else ("0.85" if i < k else "white")
            strip.text(i, 0, step, ha="center", va="center", fontsize=min(7.0, 46.0 / len(steps)),
                       fontweight="bold" if i == k else "normal",
                       bbox={"boxstyle": "round,pad=0.25", "facecolor": face, "edgecolor": "0.4"})
        rows, cols = np.shape(np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix))
        ax = fig.add_subplot(grid[2 * row + 1, col])
        image = heatmap(ax, matrix, row_labels=[f"t{i + 1}" for i in range(rows)], cmap="RdBu_r",
                        col_labels=[str(j + 1) for j in range(cols)], decimals=decimals, colorbar=False,
                        vmin=-lim, vmax=lim, title=f"{k + 1}. {caption}")
        heatmaps.append(ax)
    fig.colorbar(image, ax=heatmaps, shrink=0.6, label="value (one scale for every panel)")
    if title:
        fig.suptitle(title)
    return fig
