"""Words as datatrove splits English text: spaCy's English tokenizer, over a whole batch in numpy.

datatrove's `split_into_words` (Gopher quality and repetition, FineWeb's new-line ratio) runs
`spacy.blank("en")` on each document and keeps the tokens that are not blank. This module gives
the same tokens for a whole Arrow batch at once, with no spaCy in the loop: the rules are
spaCy's own, read from the installed spaCy at setup (the prefix, suffix and infix patterns of
`spacy.lang.en`, its tokenizer exceptions and URL pattern), and applied as spaCy's tokenizer
applies them (spacy/tokenizer.pyx):

1. The text is cut on whitespace (`str.isspace`) into chunks.
2. A chunk that is a tokenizer exception ("don't" -> "do" "n't", "e.g.", "10am") is split as the
   exception says. Otherwise, repeatedly, one prefix is split off the front and one suffix off
   the back (the first prefix pattern that matches; the longest suffix), stopping early when
   what is left, or what is left without the new prefix or suffix, is an exception.
3. What remains, unless it is an exception or a URL, is split at every infix match
   (non-overlapping, left to right, one at its very start ignored).

Every step runs over all chunks of the batch together: the text is held as one array of
codepoints (whitespace removed, so a document's tokens are contiguous), substrings are compared
through 64-bit polynomial hashes of that array, each pattern is compiled into tests on a few
codepoints around a position (lookbehind, body, lookahead), and only chunks holding a character
some rule could act on take part in the affix loop. Tokens are the pieces between the cut
points that the steps add. The URL test (spaCy's regex, Python `re`) runs only on the rare
remainders that have an infix match and a dot.

4. spaCy's second pass: where a chunk's tokens spell, token by token, how the rules alone split
   an exception that holds affixes ("e.g" "." left by the infix split of "word/e.g."), they
   become the exception's tokens. (spaCy also matches such spans across a single space, which
   then change nothing but can block an overlapping match: not reproduced.)

tests/test_heuristics_compat.py compares the tokens, and the sentences (`sentences`, spaCy's
sentencizer), with spaCy's on real abstracts and documentation."""
from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

# Polynomial hashing modulo 2**64: odd base, so it has an inverse and a substring's hash can be
# normalized to its start (hash(s[a:b]) = (H[b] - H[a]) * BASE**-a).
_BASE = 0x100000001B3
_BASE_INV = pow(_BASE, -1, 2**64)
_MASK64 = 2**64 - 1
_NCP = 0x110000

# Per-codepoint flags (one uint16 table for the whole Unicode range).
SPACE, TRIGGER, TRIGGER_AFTER_DIGIT, DIGIT, DT_PUNCT, ALPHA, INFIX_START, DOT = 1, 2, 4, 8, 16, 32, 64, 128
PUNCT_CATEGORY, SENT_END = 256, 512       # Unicode P*; one of spaCy's sentencizer characters
PREFIX_FIRST, SUFFIX_LAST, RE2_SPACE = 1024, 2048, 4096   # can start a prefix; end a suffix; RE2's \s

# datatrove 0.10.1, src/datatrove/utils/text.py (Apache-2.0): PUNCTUATION and TERMINAL_PUNCTUATION.
# A word is a "symbol" word for Gopher when every character is in PUNCTUATION_SET (their union);
# FineWeb counts a line as ending in punctuation when its last character is a terminal one.
DT_PUNCTUATION = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    map(chr, (x for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))))
DT_TERMINAL_PUNCTUATION = frozenset(
    "᪩？⁈𑩂．꩞𑅃﹗𑂾\u1b7d፧𑅂꡶꘎⁉࠾᪨𑊩𑱂᱿𖩮᥅\U00011f43\U00011f44﹒𑈹𑈸።܂؞꛳\U00010f88𑗍𐩖𑙂\u061d꩟᠉\u1b7e𑗗᰼𑻸؟𑪜꧉𑗉𐽙𖫵𖬷܀꓿᜵𑗏𑁇"
    "𑗓𑥄៖𑥆𑗑𑗒꯫۔𐩗\U00010f86꡷\u2e54｡៕߹⸮.𑇅࠹𛲟꫰꤯𐽗᭞𑜼፨𑃁꣏𑇟𖬸𑪛𑜾࠷𝪈?𑃀𑗃！։꣎॥𑗖᭛᠃!၊𖺘⁇𑗌𑑋𖭄᭟𑅁𑙁⸼꩝𑗋。꧈꫱𑜽𐽖𑂿᙮។꛷"
    "\U00010f89៚᥄𑗕𑗎᪪᭚࠽𑇞𑗊𐽘\u2e53𑗔𖩯𑇍𑻷𐽕𑩃।𑗂𑇆𑁈။᱾𑱁꘏܁᜶‼𑈻‽᪫﹖𑑌𑈼\U00010f87𑗐៙᰻")


# ---------------------------------------------------------------------------------------------
# Patterns, compiled from spaCy's regular expressions into position tests.

@dataclass(frozen=True)
class Charset:
    """A set of codepoints as sorted, disjoint, inclusive ranges."""
    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @staticmethod
    def of(ranges) -> "Charset":
        merged: list[list[int]] = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return Charset(tuple(a for a, _ in merged), tuple(b for _, b in merged))

    @property
    def single(self) -> int | None:
        return self.lo[0] if len(self.lo) == 1 and self.lo[0] == self.hi[0] else None

    def codepoints(self) -> np.ndarray:
        return np.concatenate([np.arange(a, b + 1) for a, b in zip(self.lo, self.hi)])


@dataclass(frozen=True)
class Run:
    """`X{n,}`: at least `min` characters of one set, as many as there are."""
    chars: Charset
    min: int


@dataclass(frozen=True)
class Alt:
    """One fixed way a pattern can match: lookbehind characters, a body (characters or a run),
    lookahead characters (negated or not). `order` is its rank in spaCy's alternation."""
    order: int
    behind: tuple[Charset, ...]
    body: tuple[Charset, ...] | Run
    ahead: tuple[Charset, ...]
    ahead_negated: bool = False

    @property
    def literal(self) -> bool:
        return not isinstance(self.body, Run) and all(c.single is not None for c in self.body)


# --- the regex subset spaCy's prefix, suffix and infix patterns use, parsed here -------------
# (The standard library's own regex parser is not a public API.) A node is (op, value) with op
# one of "lit" (a code point), "in" ([(lo, hi)], negated), "group" ([branch, ...], each a node
# list), "repeat" (lo, hi or None, node list), "behind" / "behind_not" / "ahead" / "ahead_not"
# (node list), "^", "$".
# Anything else (., \d, \w, lazy repeats, backreferences, flags) is refused as unsupported.
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}


class _Pattern:
    def __init__(self, text: str):
        self.text, self.i = text, 0

    def peek(self, k: int = 1) -> str:
        return self.text[self.i:self.i + k]

    def take(self) -> str:
        c = self.text[self.i]
        self.i += 1
        return c

    def escaped(self) -> int:
        c = self.take()
        if c in _ESCAPES:
            return ord(_ESCAPES[c])
        if c == "x":
            code = self.text[self.i:self.i + 2]
            self.i += 2
            return int(code, 16)
        if c in "uU":
            n = 4 if c == "u" else 8
            code = self.text[self.i:self.i + n]
            self.i += n
            return int(code, 16)
        if c.isalnum():
            raise ValueError(f"spaCy pattern uses \\{c}: not supported")
        return ord(c)

    def alternation(self, closing: str | None) -> list[list]:
        branches = [[]]
        while self.i < len(self.text) and self.peek() != closing:
            c = self.take()
            if c == "|":
                branches.append([])
                continue
            node = self.atom(c)
            if node is not None:
                branches[-1].append(self.quantified(node))
        if closing is not None:
            if self.peek() != closing:
                raise ValueError("spaCy pattern has an unclosed group")
            self.take()
        return branches

    def atom(self, c: str):
        if c == "(":
            if self.peek(2) == "?:":
                self.i += 2
                return ("group", self.alternation(")"))
            kind = {"?<=": "behind", "?<!": "behind_not"}.get(self.peek(3)) or \
                {"?=": "ahead", "?!": "ahead_not"}.get(self.peek(2))
            if kind is None:
                if self.peek() == "?":
                    raise ValueError("spaCy pattern uses a group extension: not supported")
                return ("group", self.alternation(")"))
            self.i += 3 if kind.startswith("behind") else 2
            branches = self.alternation(")")
            return (kind, branches[0] if len(branches) == 1 else [("group", branches)])
        if c == "[":
            return ("in", self.charclass())
        if c == "^":
            return ("^", None)
        if c == "$":
            return ("$", None)
        if c == "\\":
            return ("lit", self.escaped())
        if c in ".*+?{":
            raise ValueError(f"spaCy pattern uses {c!r} where a character is expected: not supported")
        return ("lit", ord(c))

    def charclass(self) -> tuple[list, bool]:
        negated = self.peek() == "^"
        if negated:
            self.take()
        ranges, first = [], True
        while True:
            if self.i >= len(self.text):
                raise ValueError("spaCy pattern has an unclosed character class")
            c = self.take()
            if c == "]" and not first:
                return ranges, negated
            first = False
            lo = self.escaped() if c == "\\" else ord(c)
            if self.peek() == "-" and self.peek(2) not in ("-]", "-"):          # a range, not a final "-"
                self.take()
                d = self.take()
                hi = self.escaped() if d == "\\" else ord(d)
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))

    def quantified(self, node):
        c = self.peek()
        if c and c in "*+?":
            self.take()
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (end := self.text.find("}", self.i)) > 0 and \
                all(ch.isdigit() or ch == "," for ch in self.text[self.i + 1:end]):
            body = self.text[self.i + 1:end]
            self.i = end + 1
            lo_text, _, hi_text = body.partition(",")
            lo = int(lo_text or 0)
            hi = lo if "," not in body else (int(hi_text) if hi_text else None)
        else:
            return node
        if self.peek() in ("?", "+"):
            raise ValueError("spaCy pattern uses a lazy or possessive repeat: not supported")
        return ("repeat", (lo, hi, [node]))


def parse_pattern(pattern: str) -> list:
    """The node list of `pattern` (the subset above; one top-level alternation is a group)."""
    p = _Pattern(pattern)
    branches = p.alternation(None)
    return branches[0] if len(branches) == 1 else [("group", branches)]


def _branch_items(branches: list[list]) -> list:
    """The nodes of a group's alternation after the two rewrites the backtracking engine's own
    parser makes (the alternatives' order unchanged): a prefix shared by every branch is taken
    out, and branches of one character each become one character set."""
    branches = [list(b) for b in branches]
    prefix = []
    while all(branches) and all(b[0] == branches[0][0] for b in branches):
        prefix.append(branches[0][0])
        for b in branches:
            del b[0]
    ranges = []
    for b in branches:
        if len(b) == 1 and b[0][0] == "lit":
            ranges.append((b[0][1], b[0][1]))
        elif len(b) == 1 and b[0][0] == "in" and not b[0][1][1]:
            ranges.extend(b[0][1][0])
        else:
            return prefix + ([("group", branches)] if len(branches) > 1 else branches[0])
    return prefix + [("in", (ranges, False))]


def _charset(ranges: list, negated: bool) -> Charset:
    cs = Charset.of(ranges)
    if negated:                                  # the gaps between the ranges
        gaps, prev = [], 0
        for a, b in zip(cs.lo, cs.hi):
            if a > prev:
                gaps.append((prev, a - 1))
            prev = b + 1
        if prev < _NCP:
            gaps.append((prev, _NCP - 1))
        cs = Charset.of(gaps)
    return cs


def _expand(nodes: list) -> list[list]:
    """Every fixed sequence a pattern (parse_pattern's nodes) can match, in the order the
    backtracking engine tries them. Items: Charset, Run, ("behind"|"ahead"|"ahead_not",
    [sequence]), "^", "$"."""
    seqs: list[list] = [[]]
    for op, av in nodes:
        if op == "lit":
            alts = [[Charset.of([(av, av)])]]
        elif op == "in":
            alts = [[_charset(*av)]]
        elif op == "group":
            items = _branch_items(av)
            if len(items) == 1 and items[0][0] == "group":
                alts = [s for branch in items[0][1] for s in _expand(branch)]
            else:
                alts = _expand(items)
        elif op == "repeat":
            lo, hi, sub = av
            inner = _expand(sub)
            if hi is None:
                if len(inner) != 1 or len(inner[0]) != 1 or not isinstance(inner[0][0], Charset):
                    raise ValueError("spaCy pattern repeats more than one character: not supported")
                alts = [[Run(inner[0][0], lo)]]
            else:                                     # greedy: the most repetitions first
                alts = [[x for rep in combo for x in rep] for k in range(hi, lo - 1, -1)
                        for combo in itertools.product(inner, repeat=k)]
        elif op in ("behind", "ahead", "ahead_not"):
            inner = _expand(av)
            if len(inner) != 1 or not all(isinstance(x, Charset) for x in inner[0]):
                raise ValueError("spaCy pattern has a variable lookaround: not supported")
            alts = [[(op, inner[0])]]
        elif op == "behind_not":
            raise ValueError("spaCy pattern has a negative lookbehind: not supported")
        elif op in ("^", "$"):
            alts = [[op]]
        else:
            raise ValueError(f"spaCy pattern uses {op}: not supported")
        seqs = [s + a for s in seqs for a in alts]
    return seqs


def compile_alternatives(pattern: str, anchor: str) -> list[Alt]:
    """spaCy's prefix (anchor "^"), suffix ("$") or infix ("") regex as its alternatives in order."""
    out: list[Alt] = []
    for seq in _expand(parse_pattern(pattern)):
        if anchor == "^":
            if seq[:1] != ["^"]:
                raise ValueError("a spaCy prefix pattern is not anchored at the start")
            seq = seq[1:]
        if anchor == "$":
            if seq[-1:] != ["$"]:
                raise ValueError("a spaCy suffix pattern is not anchored at the end")
            seq = seq[:-1]
        behind, ahead, negated = (), (), False
        if seq and isinstance(seq[0], tuple) and seq[0][0] == "behind":
            behind, seq = tuple(seq[0][1]), seq[1:]
        if seq and isinstance(seq[-1], tuple) and seq[-1][0] in ("ahead", "ahead_not"):
            ahead, negated, seq = tuple(seq[-1][1]), seq[-1][0] == "ahead_not", seq[:-1]
        if any(not isinstance(x, (Charset, Run)) for x in seq):
            raise ValueError("a spaCy pattern has an assertion inside its body: not supported")
        runs = [x for x in seq if isinstance(x, Run)]
        if runs:
            run = runs[0]
            if seq[-1] is not run or len(runs) > 1 or any(x != run.chars for x in seq[:-1]) or ahead:
                raise ValueError("a spaCy pattern's repeat is not of the form X{n,}: not supported")
            body = Run(run.chars, run.min + len(seq) - 1)
        else:
            body = tuple(seq)
        if anchor == "$" and ahead:
            raise ValueError("a spaCy suffix pattern has a lookahead: not supported")
        out.append(Alt(len(out), behind, body, ahead, negated))
    return out


class _ClassTable:
    """Every character set the compiled patterns test that is not one codepoint, as one bit of
    a per-codepoint table (a test is then one gather and an AND)."""

    def __init__(self):
        self.bits: dict[Charset, int] = {}

    def bit(self, cs: Charset) -> int:
        if cs.single is not None:
            return 0
        if cs not in self.bits:
            self.bits[cs] = len(self.bits)
        return 1 << self.bits[cs]

    def build(self) -> np.ndarray:
        dtype = np.uint32 if len(self.bits) <= 32 else np.uint64
        table = np.zeros(_NCP, dtype)
        for cs, i in self.bits.items():
            for a, b in zip(cs.lo, cs.hi):
                table[a:b + 1] |= dtype(1 << i)
        return table


class _Text:
    """One batch's non-space codepoints: their flags and class bits, prefix hashes, runs."""

    def __init__(self, cps: np.ndarray, flags: np.ndarray, classes: np.ndarray, powers):
        self.cps = cps
        self.flags = flags
        self.classes = classes
        n = len(cps)
        pw, ipw = powers(n + 1)
        self.ipw = ipw
        h = np.empty(n + 1, np.uint64)
        h[0] = 0
        with np.errstate(over="ignore"):
            np.cumsum(cps.astype(np.uint64) * pw[:n], out=h[1:])
        self.h = h
        self._runs: dict[int, tuple] = {}

    def hash(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Hash of each [a, b) (equal strings, equal hashes, wherever they are)."""
        with np.errstate(over="ignore"):
            return (self.h[b] - self.h[a]) * self.ipw[a]

    def has(self, cs: Charset, bit: int, pos: np.ndarray) -> np.ndarray:
        """Whether the character at each position (all valid) is in cs."""
        if bit == 0:
            return self.cps[pos] == cs.single
        return (self.classes[pos] & bit) != 0

    def run_bounds(self, cs: Charset, bit: int):
        """Positions of cs's members in order, and the start and end of each one's run."""
        key = bit or -cs.single
        if key not in self._runs:
            members = np.flatnonzero(self.has(cs, bit, np.arange(len(self.cps))))
            new_run = np.concatenate([[True], np.diff(members) != 1]) if len(members) else np.zeros(0, bool)
            run_id = np.cumsum(new_run) - 1
            firsts = members[new_run]
            # A run's last member is the one just before the next run's first.
            lasts = np.append(members[np.flatnonzero(new_run)[1:] - 1], members[-1:]) if len(members) else members
            self._runs[key] = (members, firsts[run_id], lasts[run_id] + 1)
        return self._runs[key]

    def run_length_forward(self, cs, bit, pos):
        """Length of the run of cs's members from pos on (0 if pos is not one)."""
        members, _, run_end = self.run_bounds(cs, bit)
        if not len(members):
            return np.zeros(len(pos), np.int64)
        i = np.clip(np.searchsorted(members, pos), 0, len(members) - 1)
        return np.where(members[i] == pos, run_end[i] - pos, 0)

    def run_length_backward(self, cs, bit, end):
        """Length of the run of cs's members that ends just before `end`."""
        members, run_start, _ = self.run_bounds(cs, bit)
        if not len(members):
            return np.zeros(len(end), np.int64)
        i = np.clip(np.searchsorted(members, end - 1), 0, len(members) - 1)
        return np.where(members[i] == end - 1, end - run_start[i], 0)


def string_hash(s: str) -> int:
    """_Text.hash of a Python string."""
    h, p = 0, 1
    for ch in s:
        h = (h + ord(ch) * p) & _MASK64
        p = (p * _BASE) & _MASK64
    return h


@dataclass
class _Test:
    """Alternatives tested together: the same lookarounds, and either one body character each
    (`chars`, with each codepoint's first alternative in `orders`), literal strings of one
    length (`keys`, by hash), or one alternative with classes or a run (`alt`)."""
    behind: tuple
    ahead: tuple
    negated: bool
    length: int = 0
    chars: Charset | None = None
    cps: np.ndarray | None = None
    orders: np.ndarray | None = None
    keys: np.ndarray | None = None
    key_orders: np.ndarray | None = None
    edge_first: Charset | None = None
    edge_last: Charset | None = None
    alt: Alt | None = None


class _Matcher:
    """A compiled prefix, suffix or infix pattern."""

    def __init__(self, alts: list[Alt], classes: _ClassTable):
        self.alts = alts
        self.classes = classes
        singles: dict[tuple, dict[int, int]] = {}
        strings: dict[tuple, dict[int, int]] = {}
        self.tests: list[_Test] = []
        for alt in alts:
            around = (alt.behind, alt.ahead, alt.ahead_negated)
            if alt.literal and len(alt.body) == 1:
                singles.setdefault(around, {}).setdefault(alt.body[0].single, alt.order)
            elif alt.literal:
                strings.setdefault(around + (len(alt.body),), {}).setdefault(
                    string_hash("".join(chr(c.single) for c in alt.body)), alt.order)
            else:
                self.tests.append(_Test(*around, alt=alt))
        for around, table in singles.items():
            cps = np.array(sorted(table), np.int64)
            self.tests.append(_Test(*around, length=1, chars=Charset.of([(c, c) for c in cps]), cps=cps,
                                    orders=np.array([table[c] for c in cps.tolist()], np.int64)))
        for key, table in strings.items():
            *around, n = key
            hashes = sorted(table)
            firsts = [a.body[0] for a in alts if a.literal and len(a.body) == n
                      and (a.behind, a.ahead, a.ahead_negated) == tuple(around)]
            lasts = [
                a.body[-1]
                for a in alts
                if a.literal and len(a.body) == n and (a.behind, a.ahead, a.ahead_negated) == tuple(around)
            ]
            self.tests.append(
                _Test(
                    *around,
                    length=n,
                    keys=np.array(hashes, np.uint64),
                    key_orders=np.array([table[h] for h in hashes], np.int64),
                    edge_first=Charset.of([(c.single, c.single) for c in firsts]),
                    edge_last=Charset.of([(c.single, c.single) for c in lasts]),
                )
            )
        self.tests.sort(
            key=lambda t: min(
                t.orders.min() if t.orders is not None else np.inf,
                t.key_orders.min() if t.key_orders is not None else np.inf,
                t.alt.order if t.alt is not None else np.inf,
            )
        )
        for test in self.tests:  # register every set the tests use
            for cs in (*test.behind, *test.ahead, test.chars, test.edge_first, test.edge_last):
                if cs is not None:
                    classes.bit(cs)
            if test.alt is not None:
                body = test.alt.body
                for cs in (body.chars,) if isinstance(body, Run) else body:
                    classes.bit(cs)

    def _seq(self, t: _Text, charsets, start: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """ok, and the characters from start on are in charsets (callers check the bounds)."""
        for k, cs in enumerate(charsets):
            idx = np.flatnonzero(ok)
            if not len(idx):
                break
            ok[idx] = t.has(cs, self.classes.bit(cs), start[idx] + k)
        return ok

    def _around(self, t, test, start, end, lo, hi, ok):
        """ok, and the lookbehind before start and the lookahead after end hold."""
        if test.behind:
            ok &= start - len(test.behind) >= lo
            ok = self._seq(t, test.behind, start - len(test.behind), ok)
        if test.ahead:
            there = self._seq(t, test.ahead, end, ok & (end + len(test.ahead) <= hi))
            ok = ok & ~there if test.negated else there
        return ok

    def _matches(self, t: _Text, test: _Test, at, lo, hi, forward: bool):
        """Where the test matches inside [lo, hi) with its body starting at `at` (forward) or
        ending there (backward): (mask, length, alternative's order)."""
        never = np.iinfo(np.int64).max
        if test.alt is not None and isinstance(test.alt.body, Run):
            body = test.alt.body
            bit = self.classes.bit(body.chars)
            if forward:
                n = np.minimum(t.run_length_forward(body.chars, bit, at), hi - at)
            else:
                n = np.minimum(t.run_length_backward(body.chars, bit, at), at - lo)
            start = at if forward else at - n
            ok = n >= body.min
            order = np.full(len(at), test.alt.order)
        else:
            n = np.full(len(at), len(test.alt.body) if test.alt is not None else test.length, np.int64)
            start = at if forward else at - n
            ok = (start >= lo) & (start + n <= hi)
            if test.alt is not None:
                ok = self._seq(t, test.alt.body, start, ok)
                order = np.full(len(at), test.alt.order)
            elif test.chars is not None:
                ok = self._seq(t, (test.chars,), start, ok)
                order = np.full(len(at), never)
                idx = np.flatnonzero(ok)
                order[idx] = test.orders[np.searchsorted(test.cps, t.cps[start[idx]])]
            else:  # literal strings: their edge character, then their hash
                ok = (
                    self._seq(t, (test.edge_first,), start, ok)
                    if forward
                    else self._seq(t, (test.edge_last,), start + n - 1, ok)
                )
                order = np.full(len(at), never)
                idx = np.flatnonzero(ok)
                h = t.hash(start[idx], start[idx] + test.length)
                j = np.clip(np.searchsorted(test.keys, h), 0, len(test.keys) - 1)
                found = test.keys[j] == h
                ok[idx] = found
                order[idx[found]] = test.key_orders[j[found]]
        return self._around(t, test, start, start + n, lo, hi, ok), n, order

    def forward(self, t: _Text, pos, lo, hi):
        """The first alternative (in spaCy's order) that matches at pos within [lo, hi):
        (its order, its length); length 0 where none does."""
        best = np.full(len(pos), np.iinfo(np.int64).max, np.int64)
        length = np.zeros(len(pos), np.int64)
        for test in self.tests:
            ok, n, order = self._matches(t, test, pos, lo, hi, forward=True)
            ok &= order < best
            best[ok], length[ok] = order[ok], n[ok]
        return best, length

    def backward(self, t: _Text, end, lo):
        """The longest alternative that matches just before `end`, within [lo, end) (spaCy's
        suffix search takes the leftmost match of patterns anchored at the end)."""
        length = np.zeros(len(end), np.int64)
        for test in self.tests:
            ok, n, _ = self._matches(t, test, end, lo, end, forward=False)
            ok &= n > length
            length[ok] = n[ok]
        return length


def _first_charset(alt: Alt) -> Charset:
    return alt.body.chars if isinstance(alt.body, Run) else alt.body[0]


def _rarest_charset(alt: Alt) -> Charset:
    """The body character set a chunk is least likely to hold (fewest ASCII letters and
    digits, then fewest members): a chunk without it cannot match the alternative."""
    if isinstance(alt.body, Run):
        return alt.body.chars

    def score(cs: Charset):
        cps = cs.codepoints()
        return int(np.isin(cps, _ASCII_ALNUM).sum()), len(cps)

    return min(alt.body, key=score)


_ASCII_ALNUM = np.array([ord(c) for c in "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"])


# ---------------------------------------------------------------------------------------------


@dataclass
class Words:
    """A batch's tokens: [start, end) in `text` (the batch's non-space codepoints), the document
    of each, and tokens per document."""

    text: _Text
    start: np.ndarray
    end: np.ndarray
    doc: np.ndarray
    counts: np.ndarray
    # Where spaCy makes a whitespace token (which datatrove then drops): its position in text
    # (it comes before the token starting there) and its document.
    gap: np.ndarray
    gap_doc: np.ndarray
    # The flags of the documents' characters, whitespace included, and where each document
    # starts among them.
    raw_flags: np.ndarray
    doc_offsets: np.ndarray
    # The documents' codepoints, whitespace included, and how many non-space ones come before
    # each (positions there to positions in `text`).
    raw_cps: np.ndarray
    compact_index: np.ndarray

    def count_in_docs(self, flag: int) -> np.ndarray:
        """Per document, how many of its characters have the flag."""
        hit = np.concatenate([[0], np.cumsum((self.raw_flags & flag) != 0)])
        return np.diff(hit[self.doc_offsets])

    def _token_flags(self):
        """OR and AND of each token's character flags (tokens tile the text: one pass each)."""
        if not hasattr(self, "_or"):
            if len(self.start):
                self._or = np.bitwise_or.reduceat(self.text.flags, self.start)
                self._and = np.bitwise_and.reduceat(self.text.flags, self.start)
            else:
                self._or = self._and = np.zeros(0, self.text.flags.dtype)
        return self._or, self._and

    @property
    def lengths(self) -> np.ndarray:
        return self.end - self.start

    def any_flag(self, flag: int) -> np.ndarray:
        """Per token: whether any of its characters has the flag."""
        return (self._token_flags()[0] & flag) != 0

    def all_flag(self, flag: int) -> np.ndarray:
        """Per token: whether all of its characters have the flag."""
        return (self._token_flags()[1] & flag) != 0

    def hashes(self) -> np.ndarray:
        return self.text.hash(self.start, self.end)

    def sentences_in_spans(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """`sentences` of each span [start, end) of the documents split (positions in
        raw_cps; sorted, disjoint, each starting and ending with a non-space character and
        within one document), from these tokens: spaCy cuts a string at its whitespace first and
        every piece alone, so a span's tokens are the document's tokens inside it, and its
        whitespace tokens those strictly between its first and last character."""
        if not len(start):
            return np.zeros(0, np.int64)
        cs, ce = self.compact_index[start], self.compact_index[end]
        span = np.searchsorted(cs, self.start, side="right") - 1
        inside = (span >= 0) & (self.start < ce[np.maximum(span, 0)])
        gap_span = np.searchsorted(cs, self.gap, side="left") - 1
        gap_inside = (gap_span >= 0) & (self.gap < ce[np.maximum(gap_span, 0)])
        tokens = np.flatnonzero(inside)
        return _sentences(self, tokens, span[tokens], self.gap[gap_inside], gap_span[gap_inside], len(start))

    def to_lists(self) -> list[list[str]]:
        """The tokens as strings, per document (for tests and checks, not the stage)."""
        s = "".join(map(chr, self.text.cps.tolist()))
        out: list[list[str]] = [[] for _ in range(len(self.counts))]
        for d, a, b in zip(self.doc.tolist(), self.start.tolist(), self.end.tolist()):
            out[d].append(s[a:b])
        return out


@dataclass
class SpacyRules:
    """What spaCy's English tokenizer is built from (spacy/language.py create_tokenizer, from
    English.Defaults): what `spacy.blank("en")` tokenizes with, without building a pipeline."""

    prefix_pattern: str
    suffix_pattern: str
    infix_pattern: str
    rules: dict
    url_match: object
    token_match: object
    ORTH: int

    def find_prefix(self, s: str) -> int:
        m = re.search(self.prefix_pattern, s)
        return m.end() - m.start() if m else 0

    def find_suffix(self, s: str) -> int:
        m = re.search(self.suffix_pattern, s)
        return m.end() - m.start() if m else 0

    def find_infix(self, s: str) -> int:
        return len(list(re.finditer(self.infix_pattern, s)))


def spacy_english_rules() -> SpacyRules:
    from spacy.lang.en import English
    from spacy.symbols import ORTH
    from spacy.util import compile_infix_regex, compile_prefix_regex, compile_suffix_regex

    d = English.Defaults
    return SpacyRules(
        compile_prefix_regex(d.prefixes).pattern,
        compile_suffix_regex(d.suffixes).pattern,
        compile_infix_regex(d.infixes).pattern,
        dict(d.tokenizer_exceptions),
        d.url_match,
        d.token_match,
        ORTH,
    )


class EnglishWords:
    """spaCy's English tokenizer rules, compiled once (spaCy is imported here, not per batch)."""

    def __init__(self):
        import spacy

        self.spacy_version = spacy.__version__
        tok = spacy_english_rules()
        if tok.token_match is not None:
            raise ValueError("spaCy's English tokenizer has a token_match: not reproduced")
        classes = _ClassTable()
        self.prefix = _Matcher(compile_alternatives(tok.prefix_pattern, "^"), classes)
        self.suffix = _Matcher(compile_alternatives(tok.suffix_pattern, "$"), classes)
        infix_alts = compile_alternatives(tok.infix_pattern, "")
        self.infix = _Matcher(infix_alts, classes)
        self.class_table = classes.build()
        self.url_match = tok.url_match
        # Exceptions: hash and length of each key, and the lengths of its pieces.
        keys, lens, pieces, piece_off = [], [], [], [0]
        for key, subs in sorted(tok.rules.items()):
            keys.append(string_hash(key))
            lens.append(len(key))
            pieces.extend(len(s[tok.ORTH]) for s in subs)
            piece_off.append(len(pieces))
        order = np.argsort(np.array(keys, np.uint64), kind="stable")
        self.special_keys = np.array(keys, np.uint64)[order]
        self.special_lens = np.array(lens, np.int64)[order]
        piece_off = np.array(piece_off, np.int64)
        self.special_piece_start = piece_off[:-1][order]
        self.special_piece_count = np.diff(piece_off)[order]
        self.special_pieces = np.array(pieces, np.int64)
        # A cheap first test: first character, last character and length, hashed into a table.
        self.special_max_len = int(self.special_lens.max())
        self.special_filter = np.zeros(1 << 16, bool)
        self.special_filter[
            _special_slot(
                np.array([ord(k[0]) for k in tok.rules]),
                np.array([ord(k[-1]) for k in tok.rules]),
                np.array([len(k) for k in tok.rules]),
            )
        ] = True
        self.flags = self._flags(infix_alts)
        self._pw = np.ones(1, np.uint64)
        self._ipw = np.ones(1, np.uint64)
        self._lock = threading.Lock()
        self._span_patterns(tok)

    def _span_patterns(self, tok) -> None:
        """The second pass's patterns: exceptions that hold a prefix, suffix or infix (what
        spaCy's tokenizer puts in its special-case matcher), each as the rules alone split it."""
        keys = [
            k
            for k in sorted(tok.rules)
            if not any(ch.isspace() for ch in k) and (tok.find_prefix(k) or tok.find_suffix(k) or tok.find_infix(k))
        ]
        self.span_patterns: dict[int, tuple] = {}
        self.span_piece_lens: list[list[int]] = []
        self.span_special_cuts: list[list[int]] = []
        if not keys:
            return
        cps, offsets = _codepoints(pa.array(keys))
        t = self._text(cps)
        bounds, _ = self._cuts(t, offsets[:-1], specials=False)
        ends = np.append(bounds[1:], len(t.cps))
        owner = np.searchsorted(offsets, bounds, side="right") - 1
        by_k: dict[int, list] = {}
        for idx, key in enumerate(keys):
            lens = (ends[owner == idx] - bounds[owner == idx]).tolist()
            pieces = [len(s[tok.ORTH]) for s in tok.rules[key]]
            self.span_piece_lens.append(lens)
            self.span_special_cuts.append(np.cumsum(pieces)[:-1].tolist())
            h = string_hash(key)
            by_k.setdefault(len(lens), []).append((h, len(key), idx))
        self.span_first_keys = np.unique(
            np.array([string_hash(key[: lens[0]]) for key, lens in zip(keys, self.span_piece_lens)], np.uint64)
        )
        for k, rows in by_k.items():
            rows.sort()
            self.span_patterns[k] = (
                np.array([r[0] for r in rows], np.uint64),
                np.array([r[1] for r in rows], np.int64),
                np.array([r[2] for r in rows], np.int64),
            )

    def _flags(self, infix_alts) -> np.ndarray:
        chars = "".join(map(chr, range(_NCP)))
        import unicodedata

        from spacy.pipeline import Sentencizer

        flags = np.zeros(_NCP, np.uint16)
        flags[np.fromiter(map(str.isspace, chars), bool, _NCP)] |= SPACE
        flags[np.fromiter(map(str.isalpha, chars), bool, _NCP)] |= ALPHA
        flags[[ord(c) for c in set(DT_PUNCTUATION) | DT_TERMINAL_PUNCTUATION]] |= DT_PUNCT
        flags[ord("0") : ord("9") + 1] |= DIGIT
        flags[ord(".")] |= DOT
        flags[np.fromiter((c[0] == "P" for c in map(unicodedata.category, chars)), bool, _NCP)] |= PUNCT_CATEGORY
        flags[[ord(c) for c in Sentencizer.default_punct_chars if len(c) == 1]] |= SENT_END
        digit = Charset.of([(ord("0"), ord("9"))])
        # A chunk can be changed by a rule only if it holds the rarest character of some
        # alternative's body; suffixes that need a digit before them (units, currency) count
        # only in chunks that also hold a digit.
        for matcher in (self.prefix, self.suffix, self.infix):
            for alt in matcher.alts:
                edge = _rarest_charset(alt).codepoints()
                if matcher is self.suffix and alt.behind and alt.behind[-1] == digit:
                    flags[edge] |= TRIGGER_AFTER_DIGIT
                else:
                    flags[edge] |= TRIGGER
        for alt in infix_alts:
            flags[_first_charset(alt).codepoints()] |= INFIX_START
        for alt in self.prefix.alts:
            flags[_first_charset(alt).codepoints()] |= PREFIX_FIRST
        for alt in self.suffix.alts:
            flags[(alt.body.chars if isinstance(alt.body, Run) else alt.body[-1]).codepoints()] |= SUFFIX_LAST
        flags[[ord(c) for c in "\t\n\x0c\r "]] |= RE2_SPACE
        return flags

    def _text(self, cps: np.ndarray) -> _Text:
        return _Text(cps.astype(np.int64), self.flags[cps], self.class_table[cps], self._powers)

    def _powers(self, n: int):
        with self._lock:
            if len(self._pw) < n:
                size = max(n, 2 * len(self._pw))
                with np.errstate(over="ignore"):
                    base = np.full(size, _BASE, np.uint64)
                    base[0] = 1
                    self._pw = np.cumprod(base)
                    base[1:] = np.uint64(_BASE_INV)
                    self._ipw = np.cumprod(base)
            return self._pw, self._ipw

    def _special(self, t: _Text, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Index into the exception table of each [a, b), or -1."""
        out = np.full(len(a), -1, np.int64)
        n = b - a
        idx = np.flatnonzero((n > 0) & (n <= self.special_max_len))
        idx = idx[self.special_filter[_special_slot(t.cps[a[idx]], t.cps[b[idx] - 1], n[idx])]]
        if len(idx):
            h = t.hash(a[idx], b[idx])
            i = np.clip(np.searchsorted(self.special_keys, h), 0, len(self.special_keys) - 1)
            hit = (self.special_keys[i] == h) & (self.special_lens[i] == n[idx])
            out[idx[hit]] = i[hit]
        return out

    def split(self, text: pa.Array) -> Words:
        """The batch's tokens, as datatrove's word tokenizer gives them (blank ones dropped)."""
        cps_all, doc_offsets = _codepoints(text)
        flags_all = self.flags[cps_all]
        nonspace = (flags_all & SPACE) == 0
        compact_index = np.concatenate([[0], np.cumsum(nonspace)])
        t = self._text(cps_all[nonspace])
        chunk_start = compact_index[_run_starts(nonspace, doc_offsets)]
        bounds, changed = self._cuts(t, chunk_start, specials=True)
        bounds = self._merge_special_spans(t, bounds, chunk_start, changed)
        end = np.append(bounds[1:], len(t.cps)).astype(np.int64)
        doc = np.searchsorted(compact_index[doc_offsets], bounds, side="right") - 1
        counts = np.bincount(doc, minlength=len(doc_offsets) - 1).astype(np.int64)
        # Whitespace runs: spaCy skips one space after a word; the rest of a run, and a run at a
        # document's start (all of it), is a token.
        space = ~nonspace
        run_start = _run_starts(space, doc_offsets)
        run_doc = np.searchsorted(doc_offsets, run_start, side="right") - 1
        doc_start_mark = np.zeros(len(cps_all) + 1, bool)
        doc_start_mark[doc_offsets] = True
        run_last = space & (~np.append(space[1:], False) | doc_start_mark[1:])
        run_len = np.flatnonzero(run_last) + 1 - run_start
        leading = run_start == doc_offsets[run_doc]
        is_token = leading | (run_len >= 2) | (cps_all[run_start] != 32)
        gap, gap_doc = compact_index[run_start[is_token]], run_doc[is_token]
        return Words(t, bounds, end, doc, counts, gap, gap_doc, flags_all, doc_offsets, cps_all, compact_index)

    def sentences(self, text: pa.Array) -> np.ndarray:
        """Sentences per string as spaCy's sentencizer finds them (what datatrove's
        split_into_sentences counts): one where a string has a token, and one more at each
        token that is neither punctuation nor a sentence-end character and comes after a
        sentence-end character with no such token between (whitespace tokens included)."""
        w = self.split(text)
        return _sentences(w, np.arange(len(w.start)), w.doc, w.gap, w.gap_doc, len(w.counts))

    def _cuts(self, t: _Text, chunk_start: np.ndarray, specials: bool):
        """Sorted token starts for chunks [chunk_start[i], chunk_start[i+1]) of t (the last one
        ending at t's end), and the chunks the rules may have split."""
        total = len(t.cps)
        chunk_end = np.append(chunk_start[1:], total).astype(np.int64)
        cuts = [chunk_start]

        def special(a, b):
            return self._special(t, a, b) >= 0 if specials else np.zeros(len(a), bool)

        # Chunks a rule may change: a trigger character, a suffix after a digit, or an exception.
        held = _flags_within(t.flags, chunk_start, chunk_end)
        maybe = ((held & TRIGGER) != 0) | (((held & TRIGGER_AFTER_DIGIT) != 0) & ((held & DIGIT) != 0))
        maybe |= special(chunk_start, chunk_end)
        a, b = chunk_start[maybe], chunk_end[maybe]
        last = np.zeros(len(a), np.int64)
        done_a, done_b = [], []
        # spaCy's _split_affixes, for every chunk at once: each round splits off one prefix and
        # one suffix, and stops a chunk whose rest (or rest minus the new affix) is an exception.
        while len(a):
            stop = (b <= a) | (b - a == last) | special(a, b)
            done_a.append(a[stop]), done_b.append(b[stop])
            a, b = a[~stop], b[~stop]
            if not len(a):
                break
            last = b - a
            # Only where the first (last) character can start a prefix (end a suffix).
            pre = np.zeros(len(a), np.int64)
            i = np.flatnonzero(t.flags[a] & PREFIX_FIRST)
            pre[i] = self.prefix.forward(t, a[i], a[i], b[i])[1]
            minus_pre = (pre > 0) & (a + pre < b) & special(a + pre, b)
            suf = np.zeros(len(a), np.int64)
            i = np.flatnonzero((b - 1 >= a + pre) & (t.flags[b - 1] & SUFFIX_LAST != 0))
            suf[i] = self.suffix.backward(t, b[i], (a + pre)[i])
            minus_suf = ~minus_pre & (suf > 0) & (b - suf > a) & special(a, b - suf)
            cut_pre = (pre > 0) & ~minus_suf
            cut_suf = (suf > 0) & ~minus_pre
            cuts.append((a + pre)[cut_pre]), cuts.append((b - suf)[cut_suf])
            a = np.where(cut_pre, a + pre, a)
            b = np.where(cut_suf, b - suf, b)
            finished = minus_pre | minus_suf
            done_a.append(a[finished]), done_b.append(b[finished])
            a, b, last = a[~finished], b[~finished], last[~finished]
        fa = np.concatenate(done_a) if done_a else np.zeros(0, np.int64)
        fb = np.concatenate(done_b) if done_b else np.zeros(0, np.int64)
        keep = fb > fa
        order = np.argsort(fa[keep], kind="stable")
        cuts.extend(self._middles(t, fa[keep][order], fb[keep][order], specials))
        return _sorted_unique(cuts, total), np.flatnonzero(maybe)

    def _merge_special_spans(self, t: _Text, bounds, chunk_start, changed):
        """spaCy's second pass (_apply_special_cases): where a chunk's tokens spell, token for
        token, how the rules alone split an exception that holds affixes ("e.g" "." for
        "e.g.", "'" "'" for "''"), they become the exception's tokens. Longest matches first,
        then leftmost; a match that overlaps one taken is dropped."""
        if not len(self.span_patterns) or not len(changed):
            return bounds
        total = len(t.cps)
        chunk_end = np.append(chunk_start[1:], total).astype(np.int64)
        # Tokens of the chunks the rules split (only those can hold a multi-token match).
        first = np.searchsorted(bounds, chunk_start[changed])
        last = np.searchsorted(bounds, chunk_end[changed])  # one past the chunk's last token
        n_tok = last - first
        multi = n_tok >= 2
        if not multi.any():
            return bounds
        first, n_tok = first[multi], n_tok[multi]
        tok = np.repeat(first, n_tok) + np.arange(n_tok.sum()) - np.repeat(np.cumsum(n_tok) - n_tok, n_tok)
        tok_chunk_last = np.repeat(first + n_tok - 1, n_tok)
        ends = np.append(bounds[1:], total)
        # A match starts with some pattern's first token.
        h = t.hash(bounds[tok], ends[tok])
        j = np.clip(np.searchsorted(self.span_first_keys, h), 0, len(self.span_first_keys) - 1)
        starts = self.span_first_keys[j] == h
        tok, tok_chunk_last = tok[starts], tok_chunk_last[starts]
        found = []  # (start token, k, pattern index)
        for k, (keys, lens, index) in self.span_patterns.items():
            ok = tok + k - 1 <= tok_chunk_last
            i = tok[ok]
            if not len(i):
                continue
            a, b = bounds[i], ends[i + k - 1]
            h = t.hash(a, b)
            j = np.clip(np.searchsorted(keys, h), 0, len(keys) - 1)
            hit = (keys[j] == h) & (lens[j] == b - a)
            for pos, pat in zip(i[hit].tolist(), index[j[hit]].tolist()):
                want = self.span_piece_lens[pat]
                if [int(x) for x in (ends[pos : pos + k] - bounds[pos : pos + k])] == want:
                    found.append((pos, k, pat))
        if not found:
            return bounds
        found.sort(key=lambda m: (-m[1], m[0]))
        seen: set[int] = set()
        remove, add = [], []
        for pos, k, pat in found:
            if pos not in seen and pos + k - 1 not in seen:
                a = int(bounds[pos])
                remove.extend(range(pos + 1, pos + k))
                add.extend(a + c for c in self.span_special_cuts[pat])
            seen.update(range(pos, pos + k))
        keep = np.ones(len(bounds), bool)
        keep[remove] = False
        return _sorted_unique([bounds[keep], np.array(add, np.int64)], total)

    def _middles(self, t: _Text, fa: np.ndarray, fb: np.ndarray, specials: bool) -> list[np.ndarray]:
        """Cuts inside what the affix loop left: exceptions' pieces, then infix splits."""
        out = []
        spec = self._special(t, fa, fb) if specials else np.full(len(fa), -1)
        is_spec = spec >= 0
        if is_spec.any():
            idx = spec[is_spec]
            counts = self.special_piece_count[idx]
            group_start = np.cumsum(counts) - counts
            k = np.arange(counts.sum()) - np.repeat(group_start, counts)
            lens = self.special_pieces[np.repeat(self.special_piece_start[idx], counts) + k]
            ends = np.cumsum(lens)
            before = np.concatenate([[0], ends])[group_start]
            out.append(np.repeat(fa[is_spec], counts) + ends - np.repeat(before, counts))
        fa, fb = fa[~is_spec], fb[~is_spec]
        if not len(fa):
            return out
        # Infix candidates: the characters an infix can start with, in remainders holding one
        # after their first character.
        has = (fb - fa > 1) & (_flags_within(t.flags, np.minimum(fa + 1, fb), fb) & INFIX_START != 0)
        fa, fb = fa[has], fb[has]
        if not len(fa):
            return out
        n = fb - fa
        owner = np.repeat(np.arange(len(fa)), n)
        pos = np.repeat(fa, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        cand = (t.flags[pos] & INFIX_START) != 0
        pos, owner = pos[cand], owner[cand]
        order, length = self.infix.forward(t, pos, fa[owner], fb[owner])
        hit = length > 0
        pos, owner, length = pos[hit], owner[hit], length[hit]
        # finditer: matches do not overlap; one that starts inside an earlier match taken
        # (a dot run's tail) is not a match. Taken matches depend on earlier taken ones only,
        # so this settles in as many rounds as there are nested overlaps (one, in practice).
        ends = pos + length
        taken = np.ones(len(pos), bool)
        while True:
            reach = np.where(taken, ends, -1)
            prev_end = np.concatenate([[-1], np.maximum.accumulate(reach)[:-1]]) if len(pos) else reach
            now = pos >= prev_end
            if np.array_equal(now, taken):
                break
            taken = now
        pos, owner, ends = pos[taken], owner[taken], ends[taken]
        # A match at the remainder's very start is skipped (spaCy: infix_start == start).
        real = pos > fa[owner]
        pos, owner, ends = pos[real], owner[real], ends[real]
        if not len(pos):
            return out
        # A URL is not split: test spaCy's URL pattern on remainders with a match and a dot.
        split_owners = np.unique(owner)
        maybe_url = split_owners[_flags_within(t.flags, fa[split_owners], fb[split_owners]) & DOT != 0]
        if len(maybe_url):
            s = "".join(map(chr, t.cps[np.concatenate([np.arange(fa[i], fb[i]) for i in maybe_url])].tolist()))
            lens = (fb[maybe_url] - fa[maybe_url]).tolist()
            offs = np.concatenate([[0], np.cumsum(lens)]).tolist()
            url = np.array([self.url_match(s[offs[i] : offs[i + 1]]) is not None for i in range(len(lens))], bool)
            if url.any():
                keep = ~np.isin(owner, maybe_url[url])
                pos, ends = pos[keep], ends[keep]
        out.append(pos)
        out.append(ends)
        return out


def _run_starts(member: np.ndarray, doc_offsets: np.ndarray) -> np.ndarray:
    """Where runs of members start: a member after a non-member or at a document's start."""
    start = np.zeros(len(member), bool)
    if len(member):
        start[1:] = member[1:] & ~member[:-1]
        first = doc_offsets[:-1][doc_offsets[:-1] < len(member)]
        start[0] = member[0]
        start[first] = member[first]
    return np.flatnonzero(start)


def _flags_within(flags: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """OR of the flags of each [a, b) (ranges in order, not overlapping, none empty)."""
    if not len(a):
        return np.zeros(0, flags.dtype)
    edges = np.empty(2 * len(a), np.int64)
    edges[0::2], edges[1::2] = a, b
    padded = np.append(flags, flags.dtype.type(0))
    return np.bitwise_or.reduceat(padded, edges)[0::2]


def _special_slot(first: np.ndarray, last: np.ndarray, length: np.ndarray) -> np.ndarray:
    return (first * 40503 + last * 9973 + length * 613) & 0xFFFF


def _sorted_unique(parts: list[np.ndarray], total: int) -> np.ndarray:
    """The distinct positions in [0, total) among parts, sorted (a mark per position: the
    positions are dense, so this beats sorting)."""
    mark = np.zeros(total + 1, bool)
    for p in parts:
        mark[p] = True
    return np.flatnonzero(mark[:total])


def _sentences(
    w: Words, tokens: np.ndarray, token_unit: np.ndarray, gap: np.ndarray, gap_unit: np.ndarray, n: int
) -> np.ndarray:
    """EnglishWords.sentences of n units (documents, or spans of them), given the tokens of
    `w` (indices) and whitespace tokens (positions) of each unit."""
    # Tokens and whitespace tokens in order: by unit, then position (a whitespace token goes
    # before the token that starts where it is).
    is_word = np.concatenate([np.ones(len(tokens), bool), np.zeros(len(gap), bool)])
    doc = np.concatenate([token_unit, gap_unit])
    order = np.lexsort((np.concatenate([2 * w.start[tokens] + 1, 2 * gap]), doc))
    doc, is_word = doc[order], is_word[order]
    punct = np.zeros(len(order), bool)
    end = np.zeros(len(order), bool)
    punct[is_word] = w.all_flag(PUNCT_CATEGORY)[tokens][order[is_word]]
    end[is_word] = (w.any_flag(SENT_END) & (w.lengths == 1))[tokens][order[is_word]]
    wordy = ~punct & ~end
    idx = np.arange(len(order))
    last_end = np.maximum.accumulate(np.where(end, idx, -1))
    last_wordy = np.maximum.accumulate(np.where(wordy, idx, -1))
    first_of_doc = np.searchsorted(doc, doc)
    prev_end = np.concatenate([[-1], last_end[:-1]])
    prev_wordy = np.concatenate([[-1], last_wordy[:-1]])
    starts = wordy & (prev_end > prev_wordy) & (prev_end >= first_of_doc)
    return (np.bincount(doc, minlength=n) > 0) + np.bincount(doc, starts, n).astype(np.int64)


def _codepoints(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """All documents' codepoints (uint32, concatenated) and each document's start offset."""
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    strings = text.fill_null("").to_pylist()
    joined = "".join(strings)
    cps = np.frombuffer(joined.encode("utf-32-le"), np.uint32)
    lengths = np.fromiter(map(len, strings), np.int64, len(strings))
    return cps, np.concatenate([[0], np.cumsum(lengths)])


_SHARED: EnglishWords | None = None
_SHARED_LOCK = threading.Lock()


def english_words() -> EnglishWords:
    """The process's compiled rules (built on first use: spaCy import and tables, ~3 s)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = EnglishWords()
        return _SHARED
