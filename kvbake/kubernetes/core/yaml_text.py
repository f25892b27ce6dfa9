"""Documents as YAML text that is the same bytes on every run: keys sorted, multi-line strings as literal blocks."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import yaml

LINE_WIDTH = 4096  # long values (vLLM's arguments, globs) stay on one line


class StableDumper(yaml.SafeDumper):
    """pyyaml's safe dumper; a string of several lines (a public key, a policy) is written as a literal block."""


def represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    block = "\n" in text and not any(line != line.rstrip() for line in text.splitlines())
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if block else None)


StableDumper.add_representer(str, represent_text)


def document_text(document: Mapping[str, Any]) -> str:
    """One document, keys sorted at every level (apiVersion, kind, metadata, spec come first on their own)."""
    return yaml.dump(dict(document), Dumper=StableDumper, sort_keys=True, default_flow_style=False, width=LINE_WIDTH,
                     allow_unicode=True)


def stream_text(documents: Sequence[Mapping[str, Any]], comments: Sequence[str] = ()) -> str:
    """Several documents as one YAML stream, as `kubectl apply -f -` reads it; `comments` lead it as `#` lines."""
    head = "".join(f"# {line}\n" for line in comments)
    return head + "".join(f"---\n{document_text(document)}" for document in documents)
