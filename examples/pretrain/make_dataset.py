"""Builds the pretraining corpus from text files shipped by the Debian packages of this machine.

Documents are files: English manual pages (rendered to plain text with groff), the plain-text
files of /usr/share/doc (changelogs, READMEs, NEWS, copyright notices), the Python standard
library's sources (/usr/lib/python3.*), and Perl's pod manuals. Exact duplicates are dropped;
each source is capped so that none dominates. Tokens are bytes (the model adds a BOS token, 256,
at each document start), so no tokenizer needs to travel with the data.

Output: data/corpus.npz (np.savez_compressed) holding uint8 token arrays and int64 document
offsets for a train and a held-out split (about 2% of documents, chosen by content hash), plus a
JSON manifest (sources, paths, sizes). Run once, here; the file is committed, so training needs
no download and no Debian package:

    python3 examples/pretrain/make_dataset.py [--out examples/pretrain/data/corpus.npz]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
MB = 1 << 20
MIN_DOC_BYTES = 200  # stubs (".so" redirects, one-line notices) carry no text
MAX_DOC_BYTES = 64 * 1024  # a 5 MB changelog would otherwise be a large share of a source
HELDOUT_MODULUS = 50  # documents whose content hash is 0 mod 50 (about 2%) are held out
MAN_SECTIONS = ("man1", "man2", "man3", "man4", "man5", "man6", "man7", "man8")
MAN_SKIP_PREFIXES = ("gcloud",)  # 16k generated, near-identical CLI pages
DOC_NAME = re.compile(r"^(changelog|NEWS|README|copyright|.*\.(txt|md|rst))", re.IGNORECASE)
MAN_WIDTH = "-rLL=78n"


def read_text(path: str) -> str | None:
    try:
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    except (OSError, EOFError):
        return None
    if b"\0" in raw[:4096]:
        return None  # binary
    return raw.decode("utf-8", errors="replace")


def normalise(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{4,}", "\n\n\n", text).strip("\n") + "\n"
    return text


def render_man(path: str) -> str | None:
    source = read_text(path)
    if source is None or source.lstrip().startswith(".so "):
        return None
    try:
        result = subprocess.run(["groff", "-t", "-man", "-Tutf8", "-P-cbou", MAN_WIDTH],
                                input=source.encode(), capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        return None
    return result.stdout.decode("utf-8", errors="replace")


def man_pages() -> list[str]:
    paths = []
    for section in MAN_SECTIONS:
        for path in sorted(glob.glob(f"/usr/share/man/{section}/*")):
            if os.path.isfile(path) and not os.path.basename(path).startswith(MAN_SKIP_PREFIXES):
                paths.append(path)
    return paths


def doc_files() -> list[str]:
    paths = []
    for root, _, files in os.walk("/usr/share/doc"):
        for name in files:
            if DOC_NAME.match(name) and not name.endswith((".html", ".htm")):
                paths.append(os.path.join(root, name))
    return sorted(paths)


def python_sources() -> list[str]:
    paths = []
    for lib in sorted(glob.glob("/usr/lib/python3.[0-9]*")):
        for root, dirs, files in os.walk(lib):
            dirs[:] = [d for d in dirs if d not in ("test", "tests", "__pycache__",
                                                    "site-packages", "dist-packages")]
            paths += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return sorted(paths)


def perl_pods() -> list[str]:
    return sorted(glob.glob("/usr/share/perl/*/pod/*.pod"))


# (name, file lister, reader, cap in bytes)
SOURCES = [
    ("man", man_pages, render_man, 16 * MB),
    ("doc", doc_files, read_text, 9 * MB),
    ("python", python_sources, read_text, 9 * MB),
    ("perl_pod", perl_pods, read_text, 2 * MB),
]


def stable_order(paths: list[str], salt: str) -> list[str]:
    """A shuffle that depends only on the paths (so runs on other machines agree)."""
    return sorted(paths, key=lambda p: hashlib.sha1((salt + p).encode()).hexdigest())


def collect(name, lister, reader, cap, seen: set, workers: int):
    paths = stable_order(lister(), name)
    docs, total = [], 0
    batch = max(workers * 4, 16)
    for start in range(0, len(paths), batch):
        chunk = paths[start:start + batch]
        with ThreadPoolExecutor(workers) as pool:
            texts = list(pool.map(reader, chunk))
        for path, text in zip(chunk, texts):
            if text is None:
                continue
            data = normalise(text).encode("utf-8")[:MAX_DOC_BYTES]
            if len(data) < MIN_DOC_BYTES:
                continue
            digest = hashlib.sha1(data).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            docs.append((path, digest, data))
            total += len(data)
            if total >= cap:
                return docs
    return docs


def pack(docs):
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum([len(d) for _, _, d in docs], out=offsets[1:])
    tokens = np.frombuffer(b"".join(d for _, _, d in docs), dtype=np.uint8)
    return tokens, offsets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(HERE / "data" / "corpus.npz"))
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every source cap")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    if shutil.which("groff") is None:
        sys.exit("groff is needed to render the manual pages (apt-get install groff)")

    seen: set = set()
    train, heldout, manifest_sources = [], [], {}
    for name, lister, reader, cap in SOURCES:
        docs = collect(name, lister, reader, int(cap * args.scale), seen, args.workers)
        n_bytes = sum(len(d) for _, _, d in docs)
        manifest_sources[name] = {"documents": len(docs), "bytes": n_bytes}
        print(f"{name}: {len(docs)} documents, {n_bytes / MB:.1f} MiB", flush=True)
        for doc in docs:
            (heldout if int(doc[1], 16) % HELDOUT_MODULUS == 0 else train).append(
                (name,) + doc)
    # Interleave the sources deterministically (the trainer shuffles again with its seed).
    train.sort(key=lambda d: d[2])
    heldout.sort(key=lambda d: d[2])
    train_tokens, train_offsets = pack([d[1:] for d in train])
    heldout_tokens, heldout_offsets = pack([d[1:] for d in heldout])
    manifest = {
        "description": "Text files of Debian packages (man pages rendered by groff, "
                       "/usr/share/doc text, Python stdlib sources, Perl pods); one document "
                       "per file; byte-level tokens.",
        "tokenizer": "bytes (0-255); the trainer adds BOS = 256 per document",
        "sources": manifest_sources,
        "train": {"documents": len(train), "tokens": int(train_tokens.size)},
        "heldout": {"documents": len(heldout), "tokens": int(heldout_tokens.size)},
        "train_paths": [d[1] for d in train],
        "heldout_paths": [d[1] for d in heldout],
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, train_tokens=train_tokens, train_offsets=train_offsets,
                        heldout_tokens=heldout_tokens, heldout_offsets=heldout_offsets,
                        manifest=np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8))
    summary = {k: v for k, v in manifest.items() if not k.endswith("_paths")}
    (out.parent / "manifest.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["train"]), json.dumps(summary["heldout"]))
    print(f"wrote {out} ({out.stat().st_size / MB:.1f} MiB)")


if __name__ == "__main__":
    main()
