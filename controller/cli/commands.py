"""The client verbs of ``koordpy``: ``apply``, ``get``, ``describe``, ``delete``.

Each takes the parsed ``argparse`` namespace from :mod:`koordpy.cli`, talks to the controller
API named by ``--api`` (see :mod:`controller.api.address`), and returns the exit code. Output
follows kubectl: ``pod/web created``, aligned tables, ``Error from server (NotFound): ...``.
Lists are fetched in pages of 500 objects (kubectl's ``--chunk-size`` default), so a listing
larger than one API message still arrives, consistent at its first page's resourceVersion.

Input is checked completely before anything is sent: every document of every file is decoded
and its metadata validated; one bad document fails the whole command and nothing is stored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import msgspec

from apis import validation
from apis.codec import decode_documents, dump_yaml, encode_json, to_builtins
from apis.errors import ApiError, DecodeError, UnknownKind
from apis.kinds import Kind, Registry
from apis.meta import Object
from controller import errors
from controller.api.client import CHUNK_SIZE, Applied, Client, WatchEvent
from controller.cli import printing

__all__ = ["apply", "delete", "describe", "get"]

#: Documents per Apply request, and the body size at which a batch is cut early.
BATCH_OBJECTS = 500
BATCH_BYTES = 8 * 1024 * 1024
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_QUEUE_UNIT = "scheduling.x-k8s.io/QueueUnit"
_QUEUE = "scheduling.x-k8s.io/Queue"


class InputError(Exception):
    """A file that cannot be read, or documents that cannot be applied as they are."""


@dataclass(frozen=True, slots=True)
class Document:
    """One object read from a file, with where it came from (for error messages)."""

    source: str
    index: int
    kind: Kind
    object: Object


# --- plumbing --------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Client:
    tls_ca = getattr(args, "tls_ca", "") or ""
    return Client(
        getattr(args, "api", "") or None,
        token=getattr(args, "token", "") or "",
        tls_ca=Path(tls_ca) if tls_ca else None,
    )


def _error(message: str, stream: TextIO | None = None) -> None:
    print(f"error: {message}", file=stream or sys.stderr)


def _from_server(err: Exception) -> str:
    """``Error from server (NotFound): pods "x" not found``."""
    reason = type(err).__name__ if isinstance(err, errors.StoreError) else "InternalError"
    return f"Error from server ({reason}): {err}"


def _run(verb: Any, args: argparse.Namespace) -> int:
    """Run one verb; errors that end it print one line and exit 1."""
    try:
        code: int = verb(args)
    except InputError as err:
        _error(str(err))
        return 1
    except errors.StoreError as err:
        print(_from_server(err), file=sys.stderr)
        return 1
    except (errors.ControllerError, ApiError) as err:
        _error(str(err))
        return 1
    return code


def _resolve(registry: Registry, name: str) -> Kind:
    try:
        return registry.resolve(name)
    except UnknownKind as err:
        raise InputError(str(err)) from None


def _ref(kind: Kind, name: str) -> str:
    """``pod/web``, ``reservation.scheduling.koordinator.sh/r1``."""
    return f"{_singular(kind)}/{name}"


def _singular(kind: Kind) -> str:
    lower = kind.kind.lower()
    return f"{lower}.{kind.group}" if kind.group else lower


def _namespace(kind: Kind, args: argparse.Namespace) -> str | None:
    """The namespace to read: None for every namespace (``-A``) or a cluster-scoped kind."""
    if not kind.namespaced or getattr(args, "all_namespaces", False):
        return None
    return getattr(args, "namespace", None) or "default"


def _chunk_size(args: argparse.Namespace) -> int:
    """Objects fetched per List call (``--chunk-size``, as kubectl's; 0: all in one)."""
    size = getattr(args, "chunk_size", None)
    return CHUNK_SIZE if size is None else int(size)


def _now() -> datetime:
    return datetime.now(UTC)


# --- reading manifests -----------------------------------------------------------------------


def _sources(filenames: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(name, text) of every manifest: ``-`` is stdin, a directory its manifests, sorted."""
    for filename in filenames:
        if filename == "-":
            yield "<stdin>", sys.stdin.read()
            continue
        path = Path(filename)
        if path.is_dir():
            files = sorted(
                p for p in path.iterdir() if p.suffix in _MANIFEST_SUFFIXES and p.is_file()
            )
            for file in files:
                yield str(file), _read(file)
        elif path.exists():
            yield filename, _read(path)
        else:
            raise InputError(f'the path "{filename}" does not exist')


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {err}") from None


def _show(value: str) -> str:
    return repr(value) if len(value) <= 80 else repr(value[:77]) + "..."


def _place(
    source: str, index: int, kind: Kind, obj: Object, namespace: str | None
) -> Document | DecodeError:
    """Default the namespace and check the metadata the way the store will."""
    meta = obj.metadata
    if not kind.namespaced:
        if meta.namespace:
            obj = msgspec.structs.replace(obj, metadata=msgspec.structs.replace(meta, namespace=""))
    elif meta.namespace and namespace and meta.namespace != namespace:
        return DecodeError(
            f"the namespace from the provided object {meta.namespace!r} does not match the"
            f" namespace {namespace!r}; pass --namespace={meta.namespace}",
            source=source,
            index=index,
            field="metadata.namespace",
            value=_show(meta.namespace),
        )
    elif not meta.namespace:
        obj = msgspec.structs.replace(
            obj, metadata=msgspec.structs.replace(meta, namespace=namespace or "default")
        )
    if not obj.metadata.name:
        return DecodeError(
            "Required value: name is required", source=source, index=index, field="metadata.name"
        )
    problems = validation.object_meta(obj.metadata, namespaced=kind.namespaced)
    if problems:
        first = problems[0]
        return DecodeError(
            f"{first.type}: {first.detail}",
            source=source,
            index=index,
            field=first.field,
            value=_show(first.value) if first.value is not None else "",
        )
    return Document(source, index, kind, obj)


def load(
    filenames: Sequence[str],
    registry: Registry,
    *,
    namespace: str | None = None,
    verb: str = "apply",
) -> list[Document]:
    """Every object of every file, validated; :class:`InputError` lists every bad document."""
    documents: list[Document] = []
    problems: list[str] = []
    for source, text in _sources(filenames):
        try:
            objects = decode_documents(text, source=source, registry=registry)
        except DecodeError as err:
            problems.append(str(err if err.source else err.located(source=source)))
            continue
        for index, obj in enumerate(objects):
            placed = _place(source, index, registry.for_object(obj), obj, namespace)
            if isinstance(placed, DecodeError):
                problems.append(str(placed))
            else:
                documents.append(placed)
    if problems:
        raise InputError("\nerror: ".join(problems))
    if not documents:
        raise InputError(f"no objects passed to {verb}")
    return documents


def _batches(documents: Sequence[Document]) -> Iterator[list[Document]]:
    batch: list[Document] = []
    size = 0
    for doc in documents:
        body = len(encode_json(doc.object))
        if batch and (len(batch) >= BATCH_OBJECTS or size + body > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(doc)
        size += body
    if batch:
        yield batch


# --- output ----------------------------------------------------------------------------------


def _as_list(objects: Iterable[Object]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [to_builtins(obj) for obj in objects],
    }


def _print_objects(objects: Sequence[Object], output: str, *, single: bool) -> None:
    """``-o yaml|json``: one object as itself, several (or a listing) as a ``v1`` List."""
    body: Any = objects[0] if single and len(objects) == 1 else _as_list(objects)
    if output == "json":
        print(json.dumps(to_builtins(body), indent=4, ensure_ascii=False))
    else:
        sys.stdout.write(dump_yaml(body))


# --- apply -----------------------------------------------------------------------------------


def apply(args: argparse.Namespace) -> int:
    """``koordpy apply -f FILE|DIR|- [-n NS] [-o name|yaml|json]``."""
    return _run(_apply, args)


def _apply(args: argparse.Namespace) -> int:
    with _client(args) as api:
        documents = load(args.filename, api.registry, namespace=args.namespace)
        output = args.output
        failed = False
        written: list[Object] = []
        for batch in _batches(documents):
            results = api.apply([d.object for d in batch], omit_objects=output is None)
            for doc, result in zip(batch, results, strict=True):
                if isinstance(result, Applied):
                    if output in ("yaml", "json") and result.object is not None:
                        written.append(result.object)
                    elif output == "name":
                        print(_ref(doc.kind, doc.object.metadata.name))
                    else:
                        print(f"{_ref(doc.kind, doc.object.metadata.name)} {result.outcome}")
                else:
                    failed = True
                    _error(
                        str(
                            DecodeError(
                                f"{type(result).__name__}: {result}",
                                source=doc.source,
                                index=doc.index,
                                field=getattr(result, "field", ""),
                                value=getattr(result, "value", ""),
                            )
                        )
                    )
        if written and output is not None:
            _print_objects(written, output, single=True)
    return 1 if failed else 0


# --- get -------------------------------------------------------------------------------------


def get(args: argparse.Namespace) -> int:
    """``koordpy get KIND [NAME...] [-n NS | -A] [-l SEL] [-o wide|yaml|json|name] [-w]``."""
    return _run(_get, args)


def _get(args: argparse.Namespace) -> int:
    if "," in args.kind:
        return _get_many(args)
    with _client(args) as api:
        kind = _resolve(api.registry, args.kind)
        namespace = _namespace(kind, args)
        names: list[str] = list(args.names)
        selector = args.selector or ""
        failed = False
        version = 0
        if names and kind.namespaced and namespace is None:
            raise InputError("a resource cannot be retrieved by name across all namespaces")
        if names and not args.watch:
            objects = []
            for name in names:
                try:
                    objects.append(api.get(kind, name, namespace or ""))
                except errors.NotFound as err:
                    print(_from_server(err), file=sys.stderr)
                    failed = True
        else:
            objects, version = api.list(
                kind, namespace=namespace, selector=selector, chunk_size=_chunk_size(args)
            )
            if names:
                objects = [o for o in objects if o.metadata.name in names]
        context = _context(api, kind) if args.output == "wide" else None
        widths = _print_listing(kind, objects, args, names=names, context=context)
        if not objects and not names:
            where = f" in {namespace} namespace." if namespace else ""
            print(f"No resources found{where}", file=sys.stderr)
        if args.watch:
            _watch(api, kind, args, namespace, selector, version, names, widths, context)
    return 1 if failed else 0


def _get_many(args: argparse.Namespace) -> int:
    """``get KIND,KIND...``: one table per kind (names as ``kind/name``, as kubectl prints
    them), or one List for ``-o yaml|json``."""
    if args.names or args.watch:
        raise InputError("several kinds at once take no names and no --watch")
    with _client(args) as api:
        kinds = [_resolve(api.registry, name) for name in args.kind.split(",") if name]
        everything: list[Object] = []
        printed = False
        for kind in kinds:
            objects, _ = api.list(
                kind,
                namespace=_namespace(kind, args),
                selector=args.selector or "",
                chunk_size=_chunk_size(args),
            )
            if args.output in ("yaml", "json"):
                everything.extend(objects)
                continue
            if args.output == "name":
                for obj in objects:
                    print(_ref(kind, obj.metadata.name))
                continue
            if not objects:
                continue
            wide = args.output == "wide"
            context = _context(api, kind) if wide else None
            namespaces = args.all_namespaces and kind.namespaced
            name_column = 1 if namespaces else 0
            rows = [printing.headers(kind, wide=wide, namespaces=args.all_namespaces)]
            now = _now()
            for obj in objects:
                cells = printing.row(
                    kind, obj, now=now, wide=wide, namespaces=args.all_namespaces, context=context
                )
                cells[name_column] = _ref(kind, cells[name_column])
                rows.append(cells)
            if printed:
                print()
            print("\n".join(printing.align(rows)[0]))
            printed = True
        if args.output in ("yaml", "json"):
            _print_objects(everything, args.output, single=False)
        elif not printed and args.output != "name":
            print("No resources found", file=sys.stderr)
    return 0


def _context(api: Client, kind: Kind) -> printing.PrintContext | None:
    """Other objects the wide table needs: every Queue, for a QueueUnit's position and ETA."""
    if kind.key != _QUEUE_UNIT:
        return None
    try:
        queue_kind = api.registry.for_key(_QUEUE)
    except UnknownKind:
        return None
    queues, _ = api.list(queue_kind)
    return printing.PrintContext.from_queues(queues)


def _print_listing(
    kind: Kind,
    objects: Sequence[Object],
    args: argparse.Namespace,
    *,
    names: Sequence[str],
    context: printing.PrintContext | None = None,
) -> list[int]:
    output = args.output
    if output in ("yaml", "json"):
        # An empty listing is an empty List, as kubectl prints it.
        if objects or not names:
            _print_objects(objects, output, single=len(names) == 1)
        return []
    if output == "name":
        for obj in objects:
            print(_ref(kind, obj.metadata.name))
        return []
    if not objects:
        return []
    rows = [printing.headers(kind, wide=output == "wide", namespaces=args.all_namespaces)]
    now = _now()
    rows.extend(
        printing.row(
            kind,
            obj,
            now=now,
            wide=output == "wide",
            namespaces=args.all_namespaces,
            context=context,
        )
        for obj in objects
    )
    lines, widths = printing.align(rows)
    print("\n".join(lines))
    return widths


def _watch(
    api: Client,
    kind: Kind,
    args: argparse.Namespace,
    namespace: str | None,
    selector: str,
    version: int,
    names: Sequence[str],
    widths: list[int],
    context: printing.PrintContext | None = None,
) -> None:
    """Print one line (or object) per change until interrupted."""
    events = api.watch(kind, namespace=namespace, selector=selector, resource_version=version)
    header_printed = bool(widths)
    with contextlib.closing(events):
        for event in events:
            if names and event.object.metadata.name not in names:
                continue
            header_printed = _print_event(kind, event, args, widths, header_printed, context)
            sys.stdout.flush()


def _print_event(
    kind: Kind,
    event: WatchEvent,
    args: argparse.Namespace,
    widths: list[int],
    header: bool,
    context: printing.PrintContext | None = None,
) -> bool:
    output = args.output
    if output in ("yaml", "json"):
        if output == "json":
            print(json.dumps(to_builtins(event.object), indent=4, ensure_ascii=False))
        else:
            sys.stdout.write("---\n" + dump_yaml(event.object))
        return header
    if output == "name":
        print(_ref(kind, event.object.metadata.name))
        return header
    wide = output == "wide"
    rows = [] if header else [printing.headers(kind, wide=wide, namespaces=args.all_namespaces)]
    rows.append(
        printing.row(
            kind,
            event.object,
            now=_now(),
            wide=wide,
            namespaces=args.all_namespaces,
            context=context,
        )
    )
    lines, new_widths = printing.align(rows, widths)
    widths[:] = new_widths
    print("\n".join(lines))
    return True


# --- describe --------------------------------------------------------------------------------


def describe(args: argparse.Namespace) -> int:
    """``koordpy describe KIND NAME... [-n NS | -A]``."""
    return _run(_describe, args)


def _event_kind(registry: Registry) -> Kind | None:
    try:
        return registry.for_key("Event")
    except UnknownKind:
        return None


def _describe(args: argparse.Namespace) -> int:
    with _client(args) as api:
        kind = _resolve(api.registry, args.kind)
        namespace = _namespace(kind, args)
        failed = False
        found: list[Object] = []
        if kind.namespaced and namespace is None:
            everything, _ = api.list(kind)
            for name in args.names:
                matches = [o for o in everything if o.metadata.name == name]
                if not matches:
                    print(_from_server(errors.NotFound.of(kind, name)), file=sys.stderr)
                    failed = True
                found.extend(matches)
        else:
            for name in args.names:
                try:
                    found.append(api.get(kind, name, namespace or ""))
                except errors.NotFound as err:
                    print(_from_server(err), file=sys.stderr)
                    failed = True
        event_kind = _event_kind(api.registry)
        context = _context(api, kind) if found else None
        texts = []
        for obj in found:
            events: list[Object] = []
            if event_kind is not None:
                listed, _ = api.list(event_kind, namespace=obj.metadata.namespace or None)
                events = [e for e in listed if printing.involves(e, obj)]
            texts.append(printing.describe(obj, events, now=_now(), context=context))
        if texts:
            sys.stdout.write("\n".join(texts))
    return 1 if failed else 0


# --- delete ----------------------------------------------------------------------------------


def delete(args: argparse.Namespace) -> int:
    """``koordpy delete KIND NAME...`` | ``-f FILE`` | ``KIND -l SELECTOR``."""
    return _run(_delete, args)


def _delete(args: argparse.Namespace) -> int:
    with _client(args) as api:
        targets: list[tuple[Kind, str, str]] = []
        if args.filename:
            if args.kind:
                raise InputError("name objects by KIND NAME or by -f FILE, not both")
            documents = load(args.filename, api.registry, namespace=args.namespace, verb="delete")
            targets = [
                (d.kind, d.object.metadata.name, d.object.metadata.namespace) for d in documents
            ]
        elif not args.kind:
            raise InputError("you must provide one or more resources by argument or filename")
        else:
            kind = _resolve(api.registry, args.kind)
            namespace = _namespace(kind, args)
            if args.names:
                targets = [(kind, name, namespace or "") for name in args.names]
            elif args.selector:
                listed, _ = api.list(kind, namespace=namespace, selector=args.selector)
                targets = [(kind, o.metadata.name, o.metadata.namespace) for o in listed]
                if not targets:
                    print("No resources found", file=sys.stderr)
            else:
                raise InputError(
                    "resource(s) were provided, but no name was specified (give NAME or -l)"
                )
        failed = False
        for kind, name, namespace in targets:
            try:
                api.delete(kind, name, namespace)
            except errors.StoreError as err:
                print(_from_server(err), file=sys.stderr)
                failed = True
                continue
            print(f'{_singular(kind)} "{name}" deleted')
    return 1 if failed else 0
