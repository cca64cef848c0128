"""A small PNG made here (no imaging library): a bar chart, for the vision scenario."""

from __future__ import annotations

import base64
import random
import struct
import zlib

_COLORS = ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C), (0xD6, 0x27, 0x28),
           (0x94, 0x67, 0xBD), (0x8C, 0x56, 0x4B))


def bar_chart_png(size: int = 64, bars: int = 5, seed: int = 0) -> bytes:
    """A `size` x `size` RGB PNG: white background, an axis line, `bars` coloured bars."""
    rng = random.Random(seed)
    heights = [rng.randint(size // 5, size - 8) for _ in range(bars)]
    width = max(1, (size - 8) // bars - 2)
    rows = []
    for y in range(size):
        row = bytearray(b"\x00")  # filter type 0 (None) for this scanline
        for x in range(size):
            pixel = (255, 255, 255)
            if y == size - 4 or x == 3:
                pixel = (0, 0, 0)
            else:
                bar, offset = divmod(x - 6, width + 2)
                if 0 <= bar < bars and x >= 6 and offset < width and size - 4 - heights[bar] <= y < size - 4:
                    pixel = _COLORS[bar % len(_COLORS)]
            row += bytes(pixel)
        rows.append(bytes(row))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + _chunk(b"IEND", b""))


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
