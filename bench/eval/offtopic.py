"""Off-topic sets: questions asked of a workspace that holds nothing about them.

An agent's memory tool runs on every turn, so what it returns when nothing is relevant matters
as much as what it finds when something is. Each set pairs real questions with a workspace they
were not written for; every result returned is unrelated memory injected into the prompt. The
metrics are the share of queries that return anything and the characters injected.

Sets (built from the judged data already loaded, plus the repository's demo workspace):
- `cranfield→locomo`: aeronautics questions against each LoCoMo conversation.
- `locomo→demo`: LoCoMo questions against `demo/workspace` (an engineer's notes).
- `locomo→other`: each conversation's questions against the next conversation's workspace
  (same genre, other people: the hardest set, since the topics of chat overlap).
- `cisi→cranfield`, `cranfield→cisi`: library science against aeronautics and back (large
  indexes, shared academic vocabulary).
- `locomo→crosslingual`: LoCoMo questions against the cross-lingual set's notes (mostly
  Chinese and Japanese: off-topic evidence across scripts, where keywords cannot help).
- `random→locomo`, `random→demo`: seeded word salads of made-up and rare real words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .datasets import Dataset, Query, Workspace

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "workspace"

# Rare English words (none of them is in the demo notes; a chat may still use one now and then).
RARE_WORDS = [
    "sextant",
    "trebuchet",
    "phlogiston",
    "ossuary",
    "isotope",
    "paleography",
    "marzipan",
    "zither",
    "gazebo",
    "mollusk",
    "astrolabe",
    "quern",
    "cuneiform",
    "bivalve",
    "sarcophagus",
    "lichen",
    "filigree",
    "obsidian",
    "ptarmigan",
    "basalt",
    "harpsichord",
    "falconry",
    "tessellation",
    "quince",
    "aqueduct",
    "narwhal",
    "metronome",
    "parchment",
    "sorghum",
    "chrysalis",
    "bellows",
    "cairn",
    "damask",
    "ferret",
    "gnomon",
    "halberd",
    "ibex",
    "jacquard",
    "kiln",
    "lute",
    "mandolin",
    "nautilus",
    "oboe",
    "pewter",
    "quill",
    "rhubarb",
    "saffron",
    "tundra",
    "umlaut",
    "vellum",
    "walrus",
    "yodel",
    "zeppelin",
]
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def pseudo_word(rng: random.Random) -> str:
    """A pronounceable made-up word (`bolari`, `temkuv`) that no index holds."""
    syllables = rng.randint(2, 3)
    word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))
    return word + (rng.choice(_CONSONANTS) if rng.random() < 0.5 else "")


def random_queries(n: int = 100, seed: int = 7) -> list[Query]:
    """Half made-up words, half rare real words; one to three words each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        count = rng.randint(1, 3)
        if i % 2 == 0:
            words = [pseudo_word(rng) for _ in range(count)]
        else:
            words = rng.sample(RARE_WORDS, count)
        out.append(Query(qid=f"random:{i}", text=" ".join(words)))
    return out


@dataclass
class OffTopicSet:
    """Queries paired with workspaces that hold nothing about them."""

    name: str
    pairs: list[tuple[Workspace, list[Query]]]

    @property
    def queries(self) -> int:
        return sum(len(qs) for _, qs in self.pairs)


def demo_workspace() -> Workspace:
    return Workspace("demo", DEMO, [])


def build_sets(
    datasets: list[Dataset],
    wanted: set[str] | None = None,
    crosslingual: Workspace | None = None,
) -> list[OffTopicSet]:
    """Every set whose source and target datasets are loaded (and, if given, named in `wanted`)."""
    by_name = {d.name: d for d in datasets}
    locomo = by_name.get("locomo")
    cran = by_name.get("cranfield")
    cisi = by_name.get("cisi")
    sets: list[OffTopicSet] = []
    if cran and locomo:
        qs = cran.workspaces[0].queries
        sets.append(OffTopicSet("cranfield→locomo", [(w, qs) for w in locomo.workspaces]))
    if locomo:
        all_q = [q for w in locomo.workspaces for q in w.queries]
        sets.append(OffTopicSet("locomo→demo", [(demo_workspace(), all_q)]))
        ws = locomo.workspaces
        if len(ws) > 1:
            sets.append(
                OffTopicSet(
                    "locomo→other",
                    [(ws[(i + 1) % len(ws)], w.queries) for i, w in enumerate(ws)],
                )
            )
    if cisi and cran:
        sets.append(
            OffTopicSet("cisi→cranfield", [(cran.workspaces[0], cisi.workspaces[0].queries)])
        )
        sets.append(
            OffTopicSet("cranfield→cisi", [(cisi.workspaces[0], cran.workspaces[0].queries)])
        )
    if locomo and crosslingual is not None:
        all_q = [q for w in locomo.workspaces for q in w.queries]
        sets.append(OffTopicSet("locomo→crosslingual", [(crosslingual, all_q)]))
    rq = random_queries()
    if locomo:
        sets.append(OffTopicSet("random→locomo", [(w, rq) for w in locomo.workspaces]))
    sets.append(OffTopicSet("random→demo", [(demo_workspace(), rq)]))
    if wanted is not None:
        sets = [s for s in sets if s.name in wanted]
    return sets


def offtopic_row(results: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "any": 1.0 if results else 0.0,
        "n_results": float(len(results)),
        "chars": float(sum(len(r["snippet"]) for r in results)),
        "top_score": float(results[0]["score"]) if results else 0.0,
    }


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    n = len(rows) or 1
    return {
        "queries": float(len(rows)),
        "any": sum(r["any"] for r in rows) / n,
        "results": sum(r["n_results"] for r in rows) / n,
        "chars": sum(r["chars"] for r in rows) / n,
    }
