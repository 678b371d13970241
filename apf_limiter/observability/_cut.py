"""Client-chosen text cut to a bounded width, for the text dumps' cells and the metric labels.

A client chooses some of what the views show (a ``ByHeader`` distinguisher, a path, a user
name), up to the server's own header limit: a megabyte under some servers. Uncapped, one 60 kB
path padded every row of a text dump to 60 kB, and one megabyte header made a 9 MB scrape (the
distinguisher is a label of the ``top_flow_*`` gauges, repeated on each of their samples).
"""

from __future__ import annotations

from collections.abc import Sequence

#: The widest cell a text dump prints and the longest ``distinguisher`` label the metrics
#: export, in characters; a longer one is cut and ends in :data:`CUT_MARK` and the count of
#: characters left out.
MAX_CELL_WIDTH = 256
CUT_MARK = "...(cut "


def cut(text: str, escaped: Sequence[str] | None = None) -> str:
    """``text`` if it fits :data:`MAX_CELL_WIDTH`, else its head with the cut's mark.

    Args:
        text: The text as given.
        escaped: The text's characters as they will show, one piece per character (a piece
            may be longer than one, never shorter); ``None`` for ``text`` itself. Only the
            pieces that can still show need be given.
    """
    if escaped is None:
        if len(text) <= MAX_CELL_WIDTH:
            return text
        escaped = text[:MAX_CELL_WIDTH]
    room = MAX_CELL_WIDTH - len(CUT_MARK) - len(str(len(text))) - 1  # the count and ")"
    width = 0
    kept = 0
    for piece in escaped:
        if width + len(piece) > room:
            break
        width += len(piece)
        kept += 1
    return f"{''.join(escaped[:kept])}{CUT_MARK}{len(text) - kept})"
