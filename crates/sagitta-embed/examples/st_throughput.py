"""sentence-transformers (PyTorch, CPU) on the texts that embed_throughput.rs
embeds: texts/s on 1 and 2 threads (torch.set_num_threads), cosine against
the dataset's base.f16.npy, and optionally against the vectors the Rust
example saved (`embed_throughput ... --save rust.npy`).

Not part of the build or the tests. Setup, in a venv of its own (torch
from PyPI brings its CUDA libraries along, about 6 GB in all):

    python3 -m venv ~/.cache/sagitta-bench/st-venv
    ~/.cache/sagitta-bench/st-venv/bin/pip install torch sentence-transformers
    scripts/fetch-model
    HF_HUB_OFFLINE=1 ~/.cache/sagitta-bench/st-venv/bin/python \\
        crates/sagitta-embed/examples/st_throughput.py \\
        ../shared/data/debian-minilm/base_texts.txt.gz --limit 5000 [--rust rust.npy]
"""

import argparse
import gzip
import os
import time
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def cosine_stats(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-30)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-30)
    cos = (a * b).sum(axis=1)
    return float(cos.min()), float(cos.mean())


def main() -> None:
    default_dir = Path(
        os.environ.get("SAGITTA_MODELS") or Path.home() / ".cache/sagitta/models"
    )
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("texts", type=Path, help="base_texts.txt.gz, one text per line")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="encode() batch size (its default: 32)",
    )
    p.add_argument("--model-dir", type=Path, default=default_dir / "all-minilm-l6-v2")
    p.add_argument(
        "--max-seq-length", type=int, default=None, help="override (the model's: 256)"
    )
    p.add_argument(
        "--rust",
        type=Path,
        default=None,
        help="f32 .npy saved by embed_throughput --save",
    )
    args = p.parse_args()

    with gzip.open(args.texts, "rt", encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f]
    texts = texts[: args.limit]

    start = time.perf_counter()
    model = SentenceTransformer(str(args.model_dir), device="cpu")
    if args.max_seq_length:
        model.max_seq_length = args.max_seq_length
    print(
        f"torch {torch.__version__}, loaded {args.model_dir} in {time.perf_counter() - start:.2f} s, "
        f"max_seq_length {model.max_seq_length}, batch size {args.batch_size}"
    )

    vectors = None
    for n in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(n)
        start, cpu0 = time.perf_counter(), cpu_seconds()
        vectors = model.encode(
            texts,
            batch_size=args.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
        )
        secs, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
        print(
            f"threads {n}: {len(texts)} texts in {secs:.2f} s = {len(texts) / secs:.1f} texts/s, "
            f"{len(texts) / cpu:.1f} texts per CPU-second ({cpu:.1f} CPU-s)"
        )

    npy = args.texts.with_name("base.f16.npy")
    if npy.exists() and vectors is not None:
        base = np.load(npy, mmap_mode="r")[: len(texts)].astype(np.float32)
        lo, mean = cosine_stats(vectors, base)
        print(f"cosine vs {npy} over {len(texts)} rows: min {lo:.6f}, mean {mean:.6f}")
    if args.rust is not None and vectors is not None:
        rust = np.load(args.rust)
        rows = min(len(rust), len(vectors))
        lo, mean = cosine_stats(vectors[:rows], rust[:rows])
        print(
            f"cosine vs Rust vectors {args.rust} over {rows} rows: min {lo:.6f}, mean {mean:.6f}"
        )


if __name__ == "__main__":
    main()
