"""Pictures of the paged KV cache (chapter 03) and of the prefix hash chain (chapter 04), drawn from real block managers.

Teaching aids, hand-written (not exported by a chapter): the engine never imports this module.
"""
from nanoserve.kv.blocks import BlockManager

__all__ = ["layout_blocks", "draw_block_pool", "hash_chain_rows", "draw_hash_chain"]


def layout_blocks(seq_lens, block_size, num_blocks, interleave=True):
    """Allocate blocks for `seq_lens` with a BlockManager; return (block tables, pool owners)."""
    if any(int(n) < 0 for n in seq_lens):
        raise ValueError(f"sequence lengths must be >= 0, got {list(seq_lens)}")
    manager = BlockManager(num_blocks, block_size)
    tables = [[] for _ in seq_lens]
    filled = [0] * len(seq_lens)
    # interleave=True grows the sequences one token at a time in turn, as decoding does,
    # so their blocks end up scattered through the pool; False places them one after another.
    while filled != list(seq_lens):
        for i, n in enumerate(seq_lens):
            if filled[i] < n:
                filled[i] = filled[i] + 1 if interleave else n
                manager.allocate(tables[i], filled[i])
    pool = [None] * num_blocks
    for i, t in enumerate(tables):
        for j, b in enumerate(t):
            pool[b] = (i, min(block_size, seq_lens[i] - j * block_size))
    return tables, pool


def draw_block_pool(tables, pool, block_size, ax=None, per_row=12):
    """Draw the physical pool (one box per block, filled slots shaded, `per_row` to a row) and each block table."""
    import matplotlib.pyplot as plt

    # a pool wider than `per_row` wraps onto more rows, so the figure fits a notebook column at full size
    cols, rows = min(len(pool), per_row), -(-len(pool) // per_row)
    top = 1.3 * (rows - 1)  # the pool's first row sits this high above y = 0
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.7 * cols), 1.6 + 0.45 * len(tables) + 0.6 * top))
    colors = plt.get_cmap("tab10")
    for b, owner in enumerate(pool):
        x, y = b % per_row, top - 1.3 * (b // per_row)
        ax.add_patch(plt.Rectangle((x, y), 0.9, 0.9, fill=False, lw=1))
        ax.text(x + 0.45, y - 0.25, str(b), ha="center", va="center", fontsize=8)
        if owner is not None:
            seq, used = owner
            for s in range(used):
                ax.add_patch(plt.Rectangle((x + s * 0.9 / block_size, y), 0.9 / block_size, 0.9,
                                           color=colors(seq % 10), alpha=0.7, lw=0))
    for i, t in enumerate(tables):
        y = top + 1.4 + 0.45 * i
        ax.text(-0.2, y, f"seq {i}: {t}", ha="left", va="center", fontsize=9, color=colors(i % 10))
    ax.set_xlim(-0.3, max(cols, 6))
    ax.set_ylim(-0.5, top + 1.7 + 0.45 * len(tables))
    ax.axis("off")
    ax.set_title("physical blocks (shaded = used slots) and block tables", fontsize=10)
    return ax


def hash_chain_rows(manager, tables):
    """Per table, one dict per block: block id, token ids, short hash, short parent hash, ref count, shared."""
    owners = {}
    for table in tables:
        for block in table:
            owners[block] = owners.get(block, 0) + 1
    rows = []
    for table in tables:
        row = []
        for block in table:
            entry = manager.cached_block(block)
            parent = None if entry is None else "root" if entry.parent_hash is None else _short_hash(entry.parent_hash)
            row.append({"block": block, "tokens": entry.token_ids if entry else None,
                        "hash": _short_hash(entry.hash) if entry else None, "parent": parent,
                        "ref_count": manager.ref_count(block), "shared": owners[block] > 1})
        rows.append(row)
    return rows


def draw_hash_chain(manager, tables, names=None, ax=None):
    """Draw each table's blocks as boxes (hash, tokens, ref count), arrows to the parent hash, shared blocks shaded."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    rows = hash_chain_rows(manager, tables)
    names = names or [f"request {i}" for i in range(len(rows))]
    width = max([len(r) for r in rows] + [1])
    if ax is None:
        _, ax = plt.subplots(figsize=(min(16.0, 1.6 * width + 1.2), 1.3 * len(rows) + 0.5))
    placed = {}  # block -> (x, y) of its box, so a shared block is drawn once and pointed at by both rows
    for r, row in enumerate(rows):
        y = -1.45 * r
        ax.text(-0.15, y + 0.45, names[r], ha="right", va="center", fontsize=9)
        for i, cell in enumerate(row):
            x = 2.2 * i
            if cell["shared"] and cell["block"] in placed:
                continue  # already drawn in an earlier row
            placed[cell["block"]] = (x, y)
            face = "#fde2b3" if cell["shared"] else ("#cfe8fc" if cell["hash"] else "#eeeeee")
            ax.add_patch(plt.Rectangle((x, y), 1.9, 0.9, fc=face, ec="black", lw=1))
            label = (f"block {cell['block']}  ref {cell['ref_count']}\n#{cell['hash']} <- {_hex(cell['parent'])}\n"
                     f"{_short(cell['tokens'])}" if cell["hash"] else
                     f"block {cell['block']}  ref {cell['ref_count']}\n(partial:\nnot cached)")
            ax.text(x + 0.95, y + 0.45, label, ha="center", va="center", fontsize=7, family="monospace")
    drawn = set()
    for row in rows:
        for parent, cell in zip(row, row[1:]):
            edge = (parent["block"], cell["block"])
            if cell["hash"] is None or edge in drawn:
                continue  # a partial block has no hash yet; a shared pair is linked once
            drawn.add(edge)
            (px, py), (cx, cy) = placed[parent["block"]], placed[cell["block"]]
            ax.add_patch(FancyArrowPatch((cx, cy + 0.45), (px + 1.9, py + 0.45), arrowstyle="-|>",
                                         mutation_scale=10, color="dimgray", shrinkA=1, shrinkB=1))
    ax.set_xlim(-1.0, 2.2 * width)
    ax.set_ylim(-1.45 * (len(rows) - 1) - 0.3, 1.2)
    ax.axis("off")
    ax.set_title("prefix hash chain: each block's hash covers its parent's hash "
                 "(arrow) and its own tokens; shaded = shared", fontsize=9)
    return ax


def _short_hash(h: int) -> str:
    """The first six hex digits of a 256-bit hash."""
    return f"{h:064x}"[:6]


def _hex(parent):
    """A parent hash as drawn: '#abc123', or 'root' for the first block."""
    return parent if parent == "root" else f"#{parent}"


def _short(tokens, keep=4):
    """Token ids as a short string: the first `keep`, then an ellipsis."""
    shown = ",".join(str(t) for t in tokens[:keep])
    return f"[{shown}{',…' if len(tokens) > keep else ''}]"
