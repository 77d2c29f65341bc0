"""`python -m hf_heads.cli.export_base MODEL_DIR OUT_DIR`: a saved hf_heads model (a run's output_dir, a checkpoint, an
`export_for_hub` directory) written as its base architecture (`model.export_base`: the backbone's own transformers
class, its tokenizer and a model card, no hf_heads code), and with `--gguf FILE` also as a GGUF file for llama.cpp
(`model.export_gguf`, Llama-family models). A refusal (a head that does not fold, an architecture GGUF is not written
for) is one line `error: ...`, exit status 2."""

from __future__ import annotations

import argparse
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from hf_heads.cli.errors import UsageError, main_wrapper
from hf_heads.modeling import HeadsConfig, HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification

MODEL_CLASSES = {cls.__name__: cls for cls in (HeadsForCausalLM, HeadsForSeq2SeqLM, HeadsForSequenceClassification)}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hf_heads.cli.export_base", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="directory of a saved hf_heads model")
    parser.add_argument("output_dir", help="directory to write the base-architecture model into")
    parser.add_argument("--gguf", metavar="FILE", help="also write a GGUF file (Llama-family models) at this path")
    parser.add_argument("--gguf_dtype", choices=("f16", "f32"), default="f16", help="GGUF tensor type (default f16)")
    parser.add_argument("--no_verify", action="store_true", help="skip loading the outputs back to compare them")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    config = AutoConfig.from_pretrained(args.model)
    if not isinstance(config, HeadsConfig):
        raise UsageError(f"{args.model} is not an hf_heads model (model_type={config.model_type!r}): nothing to do")
    name = next((n for n in config.architectures or () if n in MODEL_CLASSES), None)
    if name is None:
        raise UsageError(f"{args.model}: config.architectures={config.architectures!r} names no hf_heads model class")
    model = MODEL_CLASSES[name].from_pretrained(args.model).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError, TypeError):
        tokenizer = None  # a directory without a tokenizer: the export has none either
    out = model.export_base(args.output_dir, tokenizer=tokenizer, verify=not args.no_verify)
    print(f"base-architecture export written to {out}")
    if args.gguf:
        path = Path(args.gguf)
        path = model.export_gguf(path, tokenizer=tokenizer, dtype=args.gguf_dtype, verify=not args.no_verify)
        print(f"GGUF ({args.gguf_dtype}) written to {path}")


if __name__ == "__main__":
    main_wrapper(main)
