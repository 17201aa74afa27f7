"""Mixing sources by weight (docs/sources.md): how many epochs of each source's train tokens
make the packed train split hold the configured shares, which repeated documents fill a
partial epoch (seeded, by a hash of the document's shuffle key), and how the shares hold in
every window of the packed output.

The mixture uses every train token of every source at least once: the total is set by the
source that needs the most tokens beside it (max over sources of tokens / weight), and every
other source is repeated to its share. A source that would need more than its `max_epochs`
makes the mix impossible: the run is refused, saying the weight it could have."""
from __future__ import annotations

import numpy as np
import xxhash

from pipeline.errors import UserError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def shuffle_keys(ids: list[str], seed: int) -> np.ndarray:
    """Pack's shuffle order: a keyed hash of each id, independent of the split's hash of (seed,
    id). The keys of a mix's repeated copies, and their draws, derive from it."""
    return np.fromiter((xxhash.xxh3_64_intdigest(b"pack\0" + i.encode("utf-8"), seed=seed) for i in ids),
                       dtype=np.uint64, count=len(ids))


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mix (SplitMix64's finalizer), vectorized: a copy's shuffle key, and a
    uniform draw, from a document's key."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def copy_keys(keys: np.ndarray, copy: int) -> np.ndarray:
    """The shuffle keys of a source's `copy`-th repetition (copy 0: the documents' own)."""
    if copy == 0:
        return keys
    with np.errstate(over="ignore"):
        return splitmix64(keys ^ (np.uint64(copy) * _GOLDEN))


def partial_draws(keys: np.ndarray, copy: int) -> np.ndarray:
    """Each document's seeded draw in [0, 1) for the partial last copy: it repeats the documents
    of the lowest draws."""
    draw = splitmix64(copy_keys(keys, copy) ^ np.uint64(0x6D6978))      # "mix"
    return (draw >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def draw_cutoff(draws: np.ndarray, lengths: np.ndarray, tokens: float, past_end: float = 1.0) -> float:
    """The draw below which documents (taken by rising draw) hold `tokens` tokens, to the nearest
    document: the partial copy then meets its share to a document's length, not by chance.
    `past_end`: the cutoff that takes them all."""
    if not len(draws):
        return 0.0
    order = np.argsort(draws, kind="stable")
    total = np.cumsum(lengths[order])
    k = int(np.searchsorted(total, tokens))            # documents [0, k) hold < tokens
    if k < len(total) and (k == 0 or total[k] - tokens < tokens - total[k - 1]):
        k += 1
    return float(draws[order[k]]) if k < len(order) else past_end


def repeat_factors(table, rules: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Each document's repeat factor (`repeat_by`, docs/sources.md): 1 plus the `add` of every
    rule it matches, added in the rules' order; and the rules it matches (bit i: rule i). A null
    value matches no rule. A column the documents lack is refused, naming the rule."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    factors = np.ones(n, np.float64)
    matched = np.zeros(n, np.int64)
    for i, rule in enumerate(rules):
        if rule["column"] not in table.column_names:
            raise UserError(f"mix: repeat_by rule '{rule['label']}': the documents have no column "
                            f"'{rule['column']}' at pack (columns: {', '.join(table.column_names)})")
        col = table[rule["column"]]
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
        text = pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
        item = col.type.value_type if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) else None
        if rule.get("any_of") is not None and not (text or item is not None and pa.types.is_string(item)):
            raise UserError(f"mix: repeat_by rule '{rule['label']}': any_of needs a text column; "
                            f"'{rule['column']}' holds {col.type}: use min:/max:")
        if rule.get("any_of") is None and not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise UserError(f"mix: repeat_by rule '{rule['label']}': min:/max: need a number column; "
                            f"'{rule['column']}' holds {col.type}: use any_of:")
        if rule.get("any_of") is not None:
            values = pa.array(rule["any_of"], pa.string())
            hit = np.zeros(n, bool)
            if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
                items = pc.is_in(pc.list_flatten(col), value_set=values).to_numpy(zero_copy_only=False)
                hit[pc.list_parent_indices(col).to_numpy()[items]] = True
            else:
                hit = pc.fill_null(pc.is_in(col, value_set=values), False).to_numpy(zero_copy_only=False)
        else:
            x = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)      # null: nan, in no range
            with np.errstate(invalid="ignore"):
                hit = ~np.isnan(x)
                if rule.get("min") is not None:
                    hit &= x >= rule["min"]
                if rule.get("max") is not None:
                    hit &= x <= rule["max"]
        factors += np.where(hit, rule["add"], 0.0)
        matched |= hit.astype(np.int64) << np.int64(i)
    return factors, matched


def partial_draws_at(keys: np.ndarray, copies: np.ndarray) -> np.ndarray:
    """partial_draws with each document's own copy number (its partial copy): the same draw as
    partial_draws(keys, k) for a document whose copy is k."""
    with np.errstate(over="ignore"):
        ck = np.where(copies == 0, keys, splitmix64(keys ^ (copies.astype(np.uint64) * _GOLDEN)))
    draw = splitmix64(ck ^ np.uint64(0x6D6978))
    return (draw >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def weighted_parts(factors: np.ndarray, keys: np.ndarray, epochs: float) -> tuple[np.ndarray, np.ndarray]:
    """A weighted source's documents' times in the mix, epochs x factor: the whole times, and the
    fraction's ranked draw (its seeded draw over the fraction; inf without a fraction). A
    document is taken once more when its ranked draw is below the source's cutoff: a cutoff of 1
    takes each with the probability of its fraction; the planned cutoff, near 1, is the one that
    meets the source's tokens to a document's length."""
    times = epochs * factors
    whole = np.floor(times + 1e-9)
    frac = times - whole
    ranked = np.full(len(times), np.inf)
    part = frac > 1e-9
    ranked[part] = partial_draws_at(keys[part], whole[part].astype(np.int64)) / frac[part]
    return whole.astype(np.int64), ranked


def weighted_copies(factors: np.ndarray, keys: np.ndarray, epochs: float, cutoff: float) -> np.ndarray:
    """Each document's repeated copies (besides itself): copies 1..n of it are in the mix."""
    whole, ranked = weighted_parts(factors, keys, epochs)
    return whole - 1 + (ranked < cutoff)


def plan_epochs(train_tokens: dict[str, int], mix: dict[str, dict]) -> dict[str, float]:
    """Each source's epochs (>= 1) so that its share of the mixed train tokens is its weight;
    refused (UserError) where that needs more than its max_epochs or a source has no tokens."""
    total_weight = sum(m["weight"] for m in mix.values())
    weights = {s: mix[s]["weight"] / total_weight for s in mix}
    empty = [s for s in mix if not train_tokens.get(s)]
    if empty:
        raise UserError(f"mix: source {', '.join(map(repr, empty))} has no train tokens left after its chain and "
                        "the shared tail: it cannot take a share")
    total = max(train_tokens[s] / weights[s] for s in mix)
    epochs = {s: weights[s] * total / train_tokens[s] for s in mix}
    too_many = [s for s in mix if epochs[s] > mix[s]["max_epochs"] + 1e-9]
    if too_many:
        parts = []
        for s in too_many:
            # The weight the source could have at max_epochs, the others keeping their ratios.
            most = mix[s]["max_epochs"] * train_tokens[s]
            rest = total - weights[s] * total
            parts.append(f"mix.{s}: weight {mix[s]['weight']} needs {epochs[s]:.2f} epochs of its "
                         f"{train_tokens[s]:,} train tokens, more than its max_epochs {mix[s]['max_epochs']} "
                         f"(at most weight {most / (most + rest) * total_weight:.3g} with these tokens)")
        raise UserError("; ".join(parts) + ": lower the weight, raise max_epochs, or add documents")
    return epochs


def sliding_window_shares(lengths: np.ndarray, sources: np.ndarray, n_sources: int, row_len: int,
                          window_rows: int) -> np.ndarray:
    """Each source's share of the tokens of every window of `window_rows` consecutive packed rows
    of `row_len` tokens, the window moved one row at a time, each token counted in the row it
    lands in (a document across a row boundary is split there): (windows, sources). The
    documents are the packing order's; tokens after the last full row are left out."""
    rows = int(lengths.sum()) // row_len
    if not len(lengths) or rows < window_rows or window_rows < 1:
        return np.zeros((0, n_sources))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # Tokens of each source before each row boundary r * row_len, r = 0..rows.
    bounds = np.arange(rows + 1, dtype=np.int64) * row_len
    doc = np.searchsorted(ends, bounds, side="right")          # the document holding that token
    before = np.zeros((rows + 1, n_sources), np.int64)
    for s in range(n_sources):
        mine = np.where(sources == s, lengths, 0)
        prefix = np.concatenate([[0], np.cumsum(mine)])
        inside = np.zeros(rows + 1, np.int64)
        within = doc < len(lengths)
        d = doc[within]
        inside[within] = np.where(sources[d] == s, bounds[within] - starts[d], 0)
        before[:, s] = prefix[np.minimum(doc, len(lengths))] + inside
    counts = before[window_rows:] - before[:-window_rows]
    return counts / float(window_rows * row_len)
