"""The funnel as a picture: ``funnel.png`` beside a run's manifest, drawn from the `Funnel` that `format_funnel`
prints.

One horizontal bar per step: the pages in, then the pages left after each stage, labelled with the count and the
share of the stage's input that it dropped. The PNG is a function of the funnel alone: fixed size and resolution,
matplotlib's default style whatever the user's matplotlibrc says, and no software name or time stamp in the file,
so the same funnel gives the same bytes (with the same matplotlib and FreeType).
"""
from __future__ import annotations

import io

from c4prep.shards import atomic_output, join_uri

from .funnel import Funnel, input_problem_counts

PLOT_NAME = "funnel.png"
WIDTH_IN, HEIGHT_IN, DPI = 10.0, 6.0, 100  # 1000 x 600 pixels
KEPT_COLOUR, IN_COLOUR, DROP_COLOUR = "#4c72b0", "#8c8c8c", "#dd8452"


def funnel_rows(funnel: Funnel) -> list[tuple[str, int, str]]:
    """(label, pages, note) per bar, top to bottom: pages in, the pages left after each stage, pages written."""
    files = funnel.input_files
    rows = [("pages in", funnel.pages_in, f"{files:,} input file{'' if files == 1 else 's'}")]
    for stage in funnel.stages:
        dropped = sum(stage.dropped.values())
        share = f"{dropped / stage.pages_in:.1%}" if stage.pages_in else "-"
        rows.append((f"after {stage.namespace}", stage.pages_out, f"-{dropped:,} ({share})"))
    kept = f"{funnel.pages_out / funnel.pages_in:.1%} of pages in" if funnel.pages_in else "-"
    rows.append(("pages out (written)", funnel.pages_out, kept))
    return rows


def render_funnel_png(funnel: Funnel) -> bytes:
    """The funnel plot as PNG bytes (Agg, 1000 x 600 pixels)."""
    import matplotlib.style
    import matplotlib.ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = funnel_rows(funnel)
    with matplotlib.style.context("default"):
        figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
        FigureCanvasAgg(figure)
        axes = figure.add_axes((0.25, 0.1, 0.72, 0.8))
        _draw_bars(axes, rows, max(funnel.pages_in, 1))
        axes.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        axes.xaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
        figure.suptitle(f"C4 funnel: {funnel.pages_in:,} pages in, {funnel.pages_out:,} out", fontsize=12)
        footer = _footer(funnel)
        if footer:
            figure.text(0.01, 0.01, footer, fontsize=8, color="#c44e52")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _draw_bars(axes, rows: list[tuple[str, int, str]], scale: int) -> None:
    positions = range(len(rows))
    colours = [IN_COLOUR] + [KEPT_COLOUR] * (len(rows) - 1)
    axes.barh(positions, [pages for _, pages, _ in rows], color=colours, height=0.7)
    for position, (_, pages, note) in zip(positions, rows):
        colour = DROP_COLOUR if note.startswith("-") and not note.startswith("-0 ") else "black"
        axes.text(pages + scale * 0.01, position, f"{pages:,}  {note}", va="center", fontsize=9, color=colour)
    axes.set_yticks(list(positions), [label for label, _, _ in rows], fontsize=9)
    axes.invert_yaxis()
    axes.set_xlim(0, scale * 1.3)
    axes.set_xlabel("pages")
    axes.spines[["top", "right"]].set_visible(False)


def _footer(funnel: Funnel) -> str:
    return f"skipped bad input: {input_problem_counts(funnel)}" if funnel.input_problems else ""


def write_funnel_plot(output_uri: str, png: bytes) -> str:
    """Write the plot's bytes to ``<output_uri>/funnel.png`` in one atomic step (local or remote); its URI."""
    uri = join_uri(output_uri, PLOT_NAME)
    with atomic_output(uri) as stream:
        stream.write(png)
    return uri
