"""Plot helpers shared by the chapters (matplotlib only; nothing from the model)."""

from __future__ import annotations

import numpy as np


def _luminance(rgba) -> float:
    """Relative luminance (WCAG 2) of an RGBA colour; below 0.179, white text contrasts more than black."""
    c = np.asarray(rgba[:3], dtype=float)
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2])


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
        for (i, j), value in np.ndenumerate(m):
            # white text on a dark cell, black on a light one, for any colour map (light-to-dark such as
            # "Blues" as well as dark-to-light such as "viridis"): the cell colour's relative luminance
            dark = _luminance(im.cmap(im.norm(value))) < 0.179
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
