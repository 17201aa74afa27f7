"""Characters the rules write in ASCII, in other code points: non-breaking and figure hyphens and
spaces and the minus sign ("123‑45‑6789", a card number with no-break spaces), the digits of
every other script and the full-width forms ("٠٣/١٢/٢٠١٩", "０３／１２／２０１９"). Folded one
character for one, so offsets in the folded text hold in the original."""
import unicodedata

ASCII_FOLD = str.maketrans({
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2212": "-", "\u00a0": " ", "\u2007": " ", "\u202f": " ",
    "\u3000": " ",
    **{chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)},
    # Every decimal digit outside ASCII lies below U+1FC00.
    **{chr(c): str(unicodedata.digit(chr(c))) for c in range(0x80, 0x1FC00) if unicodedata.category(chr(c)) == "Nd"},
})
