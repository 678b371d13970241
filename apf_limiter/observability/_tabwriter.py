r"""An equivalent of Go's ``text/tabwriter``, for the Kubernetes-style debug dumps.

Kubernetes renders its APF dumps through a tab writer created with minimum cell width 8, tab
width 0, padding 1 and pad character ``' '``; :func:`tabwrite` lays text out the same way, so
that the dumps line up byte for byte with the upstream ones.

How the layout works (as in Go): text is split into lines (at ``\n`` or ``\f``) and each line
into *cells* at tab characters (``\t``, or a vertical tab ``\v``, which with Go's flags all
off lays out the same). A cell is terminated by its tab; the text after a line's last tab is
not part of any column and is printed as it is. A *column block* is a run of consecutive lines
that all have a terminated cell in the same column; every cell of the block is padded to the
block's width, the widest cell plus ``padding`` (at least ``minwidth``). Blocks are found
column by column from the left, recursively, so a short line splits the blocks to its right. A
line without any tab, or one ended by a form feed, ends everything buffered so far (later lines
start afresh); every line break is written as ``\n``.
"""

from __future__ import annotations

import re

# Cell text can hold any character a request carried (a percent-decoded path, a user name):
# these split cells and lines exactly where Go's writer splits them.
_LINE_BREAK = re.compile("([\n\f])")
_CELL_END = re.compile("[\t\v]")


def tabwrite(
    text: str,
    *,
    minwidth: int = 8,
    tabwidth: int = 0,
    padding: int = 1,
    padchar: str = " ",
) -> str:
    r"""Align tab-separated ``text`` into columns exactly as Go's ``text/tabwriter`` does.

    Args:
        text: Lines separated by ``"\n"`` (or ``"\f"``), cells terminated by ``"\t"`` (or
            ``"\v"``).
        minwidth: Minimal width of a cell, padding included.
        tabwidth: Width of a tab character (used only when ``padchar`` is a tab).
        padding: Padding added to the widest cell of a column block.
        padchar: The padding character; a tab pads with tabs (and ``tabwidth`` sets their width).

    Returns:
        The aligned text (with Go's flags all off: left-aligned, no empty-column discarding).
    """
    if len(padchar) != 1:
        raise ValueError(f"padchar must be one character, got {padchar!r}")
    writer = _Writer(minwidth, tabwidth, padding, padchar)
    return writer.run(text)


class _Writer:
    def __init__(self, minwidth: int, tabwidth: int, padding: int, padchar: str) -> None:
        self.minwidth = minwidth
        self.tabwidth = tabwidth
        self.padding = padding
        self.padchar = padchar
        self.out: list[str] = []
        self.lines: list[list[str]] = []
        self.widths: list[int] = []

    def run(self, text: str) -> str:
        parts = _LINE_BREAK.split(text)  # line, break, line, break, ..., the partial line
        for raw, line_break in zip(parts[:-1:2], parts[1::2], strict=True):
            cells = _CELL_END.split(raw)
            self.lines.append(cells)
            if line_break == "\f" or len(cells) == 1:
                # A form feed always flushes; a line without cells cannot affect later
                # columns, so Go flushes there too.
                self._flush(partial=None)
        partial = _CELL_END.split(parts[-1])
        if not partial[-1]:
            # Go adds the unterminated last cell of the partial line only when it has text.
            partial.pop()
        self._flush(partial=partial)
        return "".join(self.out)

    def _flush(self, partial: list[str] | None) -> None:
        # The partial line (text after the last newline) takes part in the layout but is not
        # followed by a newline.
        count = len(self.lines)
        if partial is not None:
            self.lines.append(partial)
        self._format(0, len(self.lines), complete=count)
        self.lines = []
        self.widths = []

    def _format(self, line0: int, line1: int, complete: int) -> None:
        column = len(self.widths)
        this = line0
        while this < line1:
            if column >= len(self.lines[this]) - 1:
                this += 1
                continue
            # A column block starts here: print the lines above it first.
            self._write_lines(line0, this, complete)
            line0 = this
            width = self.minwidth
            while this < line1 and column < len(self.lines[this]) - 1:
                width = max(width, len(self.lines[this][column]) + self.padding)
                this += 1
            self.widths.append(width)
            self._format(line0, this, complete)
            self.widths.pop()
            line0 = this
        self._write_lines(line0, line1, complete)

    def _write_lines(self, line0: int, line1: int, complete: int) -> None:
        out = self.out
        widths = self.widths
        for index in range(line0, line1):
            for j, cell in enumerate(self.lines[index]):
                out.append(cell)
                if j < len(widths):
                    out.append(self._pad(len(cell), widths[j]))
            if index < complete:
                out.append("\n")

    def _pad(self, text_width: int, cell_width: int) -> str:
        if self.padchar != "\t":
            return self.padchar * (cell_width - text_width)
        if self.tabwidth == 0:
            return ""  # tabs have no width: no padding is possible
        tab = self.tabwidth
        cell_width = (cell_width + tab - 1) // tab * tab
        return "\t" * ((cell_width - text_width + tab - 1) // tab)
