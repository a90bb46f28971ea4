"""A Kubernetes API server stand-in for tests, the demo and the benchmarks.

In-process HTTP speaking the real wire protocol for the resources the director uses:
Services (with the status subresource), EndpointSlices, Nodes, Leases and Events. List,
get, create, update (optimistic concurrency on resourceVersion), merge and strategic-merge
patch, delete; watch with resourceVersion, bookmarks, timeoutSeconds and 410 "Expired"
after a compaction; bearer-token auth. JSON follows what kube-apiserver sends: list items
carry no kind/apiVersion, watch objects do, errors are ``Status`` objects.

It is driven through the official client by the code under test; tests also use it
directly (``create``, ``patch``, ``delete``) to play the cluster. ``outage()`` takes it off
the network (listening socket closed, open watches cut) and brings it back on the same port.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime as dt
import ipaddress
import json
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool  # has a status subresource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS = {
    k.plural: k
    for k in (
        Kind("", "v1", "services", "Service", True, True),
        Kind("", "v1", "nodes", "Node", False, True),
        Kind("", "v1", "events", "Event", True, False),
        Kind("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, False),
        Kind("coordination.k8s.io", "v1", "leases", "Lease", True, False),
        Kind("", "v1", "namespaces", "Namespace", False, True),
    )
}
# What a cluster with the director installed has (deploy/kubernetes/rbac.yaml makes the last).
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "lvs-director")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Lists that kube-apiserver merges by key (``k:{...}`` in a field set); every other list is
# atomic, owned as a whole. Keyed by the list's path, list positions left out.
LIST_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("spec", "ports"): ("port", "protocol"),  # a Service's; an EndpointSlice's are atomic
    ("metadata", "ownerReferences"): ("uid",),
    ("status", "conditions"): ("type",),
    ("status", "addresses"): ("type",),
}
# Metadata no manager owns: the object's identity, and what the server sets.
NOT_OWNED = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
}
_ABSENT = object()


def field_set(old: Any, new: Any, path: tuple[str, ...] = ()) -> Obj | None:
    """The FieldsV1 set of what ``new`` sets or changes relative to ``old`` (None: nothing),
    as the API server records an Update operation's fields for its manager."""
    if isinstance(new, dict):
        before = old if isinstance(old, dict) else {}
        out: Obj = {}
        for key, value in new.items():
            if not path and key in ("kind", "apiVersion"):
                continue
            if path == ("metadata",) and key in NOT_OWNED:
                continue
            sub = field_set(before.get(key, _ABSENT), value, (*path, key))
            if sub is not None:
                out[f"f:{key}"] = sub
        if old is _ABSENT and len(path) > 1:  # a map or optional struct this write created
            out = {".": {}, **out}
        return out if out or old is _ABSENT else None
    keys = LIST_KEYS.get(path)
    if isinstance(new, list) and keys and all(isinstance(i, dict) for i in new):
        had = (
            {_item_key(i, keys): i for i in old if isinstance(i, dict)}
            if isinstance(old, list)
            else {}
        )
        items: Obj = {}
        for item in new:
            key = _item_key(item, keys)
            sub = field_set(had.get(key, _ABSENT), item, (*path, "[]"))
            if sub is not None:
                items[key] = {".": {}, **sub} if key not in had else sub
        return items or None
    return {} if old is _ABSENT or old != new else None


def _item_key(item: Obj, keys: tuple[str, ...]) -> str:
    return "k:" + json.dumps({k: item.get(k) for k in keys}, separators=(",", ":"))


def _without(fields: Obj, taken: Obj) -> Obj:
    """``fields`` less what ``taken`` now owns (a field changed by another manager moves to
    it, as on the API server)."""
    out: Obj = {}
    for key, sub in fields.items():
        if key not in taken:
            out[key] = sub
        elif taken[key] and sub:
            rest = _without(sub, taken[key])
            if set(rest) - {"."}:
                out[key] = rest
    return out


def _union(a: Obj, b: Obj) -> Obj:
    out = dict(a)
    for key, sub in b.items():
        out[key] = _union(out[key], sub) if key in out else sub
    return out


def _managed(
    entries: list[Obj], manager: str, subresource: str, api_version: str, fields: Obj | None
) -> list[Obj]:
    """``metadata.managedFields`` once ``manager`` wrote ``fields`` (an entry per manager and
    subresource, its time that of its last change; what it took from others leaves theirs,
    and an entry left with nothing goes)."""
    if not manager or not fields:
        return entries
    out: list[Obj] = []
    mine: Obj | None = None
    for entry in copy.deepcopy(entries):
        if entry.get("manager") == manager and entry.get("subresource", "") == subresource:
            mine = entry
            continue
        entry["fieldsV1"] = _without(entry.get("fieldsV1") or {}, fields)
        if entry["fieldsV1"]:
            out.append(entry)
    owned = _union(mine.get("fieldsV1") or {}, fields) if mine else fields
    entry = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": _now()[:19] + "Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": owned,
    }
    if subresource:
        entry["subresource"] = subresource
    return [*out, entry]


# -- validation, as kube-apiserver words it (the subset the director's writes can meet) --------
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
RFC1123_LABEL_TEXT = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
QUALIFIED_NAME_TEXT = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")


def validate(plural: str, obj: Obj, current: Obj | None) -> None:
    """422 Invalid (400 for a malformed MicroTime) for what kube-apiserver refuses."""
    kind, name = KINDS[plural].kind, obj["metadata"].get("name", "")
    errors: list[str] = []
    for key in obj["metadata"].get("annotations") or {}:
        if not _qualified(key):
            errors.append(
                f"metadata.annotations: Invalid value: {json.dumps(key)}: name part "
                "must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character"
            )
    check = {
        "services": _service_errors,
        "endpointslices": _slice_errors,
        "events": _event_errors,
        "leases": _lease_errors,
    }.get(plural)
    if check is not None:
        errors += check(obj, current)
    if errors:
        code, reason = (400, "BadRequest") if errors[0].startswith("400 ") else (422, "Invalid")
        text = "; ".join(e.removeprefix("400 ") for e in errors)
        raise ApiError(code, reason, f'{kind} "{name}" is invalid: {text}')


def _qualified(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and QUALIFIED_NAME.fullmatch(name) is not None


def _service_errors(obj: Obj, current: Obj | None) -> list[str]:
    errors, spec = [], obj.get("spec") or {}
    name = obj["metadata"].get("name", "")
    if current is None and not (len(name) <= 63 and DNS1035.fullmatch(name)):
        errors.append(
            f"metadata.name: Invalid value: {json.dumps(name)}: a DNS-1035 label "
            "must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character"
        )
    kind = spec.get("type", "ClusterIP")
    if not spec.get("ports") and kind != "ExternalName" and spec.get("clusterIP") != "None":
        errors.append("spec.ports: Required value")
    for index, port in enumerate(spec.get("ports") or ()):
        port_name = port.get("name") if isinstance(port, dict) else None
        if port_name and not (len(port_name) <= 63 and DNS1123_LABEL.fullmatch(port_name)):
            errors.append(
                f"spec.ports[{index}].name: Invalid value: {json.dumps(port_name)}: "
                + RFC1123_LABEL_TEXT
            )
    klass = spec.get("loadBalancerClass")
    if isinstance(klass, str) and not _qualified(klass):
        errors.append(
            f"spec.loadBalancerClass: Invalid value: {json.dumps(klass)}: " + QUALIFIED_NAME_TEXT
        )
    if klass is not None and kind != "LoadBalancer":
        errors.append(
            "spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"
        )
    before = (current or {}).get("spec") or {}
    if (
        current is not None
        and before.get("type") == "LoadBalancer" == kind
        and before.get("loadBalancerClass") != klass
    ):
        errors.append(
            f"spec.loadBalancerClass: Invalid value: {json.dumps(klass)}: may not change once set"
        )
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    for index, item in enumerate(ingress):
        ip = item.get("ip")
        if ip is not None and not _ip(ip):
            errors.append(
                f"status.loadBalancer.ingress[{index}].ip: Invalid value: "
                f"{json.dumps(ip)}: must be a valid IP address"
            )
    return errors


def _ip(text: object) -> bool:
    try:
        ipaddress.ip_address(str(text))
    except ValueError:
        return False
    return True


def _slice_errors(obj: Obj, current: Obj | None) -> list[str]:
    errors = []
    for i, ep in enumerate(obj.get("endpoints") or ()):
        for j, text in enumerate(ep.get("addresses") or ()):
            if not _ip(text):
                continue
            for why in _special_ip(ipaddress.ip_address(text), text):
                errors.append(
                    f"endpoints[{i}].addresses[{j}]: Invalid value: {json.dumps(text)}: {why}"
                )
    for i, port in enumerate(obj.get("ports") or ()):
        name = port.get("name")
        if name and not (len(name) <= 63 and DNS1123_LABEL.fullmatch(name)):
            errors.append(
                f"ports[{i}].name: Invalid value: {json.dumps(name)}: " + RFC1123_LABEL_TEXT
            )
    return errors


def _special_ip(address: ipaddress.IPv4Address | ipaddress.IPv6Address, text: str) -> list[str]:
    """What kube-apiserver's ValidateEndpointIP says of an endpoint's address."""
    found = []
    if address.is_unspecified:
        found.append(f"may not be unspecified ({text})")
    if address.is_loopback:
        found.append("may not be in the loopback range (127.0.0.0/8, ::1/128)")
    if address.is_link_local:
        found.append("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    raw = address.packed  # Go's IsLinkLocalMulticast: 224.0.0.0/24, ff02::/16 whatever flags
    if address.version == 4:
        link_local_multicast = raw[:3] == b"\xe0\x00\x00"
    else:
        link_local_multicast = raw[0] == 0xFF and raw[1] & 0x0F == 0x02
    if link_local_multicast:
        found.append("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
    return found


def _event_errors(obj: Obj, current: Obj | None) -> list[str]:
    involved = (obj.get("involvedObject") or {}).get("namespace")
    own = obj["metadata"].get("namespace")
    if involved is not None and involved != own:
        return [
            f"involvedObject.namespace: Invalid value: {json.dumps(involved)}: does not "
            "match event.namespace"
        ]
    return []


def _lease_errors(obj: Obj, current: Obj | None) -> list[str]:
    spec = obj.get("spec") or {}
    for field in ("acquireTime", "renewTime"):
        value = spec.get(field)
        if value is not None and not MICRO_TIME.fullmatch(str(value)):
            return [
                f"400 spec.{field}: parsing time {json.dumps(value)} as "
                '"2006-01-02T15:04:05.000000Z07:00": cannot parse'
            ]
    return []


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386. Strategic merge is the same for the fields patched here (maps merge; the
    lists involved, like status.loadBalancer.ingress, have no merge key and are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902, as kube-apiserver applies a ``application/json-patch+json`` body (with
    evanphx/json-patch): a body that is not a list of operations is 400 BadRequest; an
    operation that does not apply (a path that is not there, a failed ``test``) is 422 and
    nothing is changed. (The status codes are the API server's; the wording is not checked
    against one.)"""
    if not isinstance(ops, list) or not all(
        isinstance(op, dict) and isinstance(op.get("op"), str) and isinstance(op.get("path"), str)
        for op in ops
    ):
        raise ApiError(
            400,
            "BadRequest",
            "invalid JSON patch: a list of operations, each with op and path, is expected",
        )
    doc = copy.deepcopy(target)
    for op in ops:
        doc = _patch_op(doc, op)
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(400, "BadRequest", f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, end_ok: bool) -> int:
    if token == "-" and end_ok:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise ApiError(422, "Invalid", f"jsonpatch: invalid array index {token!r} in {path}")
    index = int(token)
    if index > len(container) - (0 if end_ok else 1):
        raise ApiError(422, "Invalid", f"jsonpatch: index {index} out of bounds in {path}")
    return index


def _missing(op: str, path: str) -> ApiError:
    return ApiError(
        422, "Invalid", f"jsonpatch {op} operation does not apply: doc is missing path: {path}"
    )


def _parent(doc: Any, path: str, op: str) -> tuple[Any, str]:
    tokens = _pointer(path)
    if not tokens:
        return None, ""
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise _missing(op, path)
    return node, tokens[-1]


def _get(doc: Any, path: str, op: str) -> Any:
    parent, last = _parent(doc, path, op)
    if parent is None and last == "":
        return doc
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, end_ok=False)]
    raise _missing(op, path)


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    parent, last = _parent(doc, path, op)
    if parent is None and last == "":
        return copy.deepcopy(value)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, end_ok=True), copy.deepcopy(value))
    else:
        raise _missing(op, path)
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> Any:
    parent, last = _parent(doc, path, op)
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, path, end_ok=False)]
    else:
        raise _missing(op, path)
    return doc


def _patch_op(doc: Any, op: Obj) -> Any:
    kind, path = op["op"], op["path"]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise ApiError(400, "BadRequest", f"jsonpatch {kind} operation: missing value")
    if kind in ("move", "copy") and not isinstance(op.get("from"), str):
        raise ApiError(400, "BadRequest", f"jsonpatch {kind} operation: missing from")
    if kind == "add":
        return _add(doc, path, op["value"])
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        return _add(_remove(doc, path, "replace"), path, op["value"], "replace")
    if kind == "move":
        value = _get(doc, op["from"], "move")
        return _add(_remove(doc, op["from"], "move"), path, value, "move")
    if kind == "copy":
        return _add(doc, path, _get(doc, op["from"], "copy"), "copy")
    if kind == "test":
        if _get(doc, path, "test") != op["value"]:
            raise ApiError(422, "Invalid", f"testing value {path} failed")
        return doc
    raise ApiError(400, "BadRequest", f"Unexpected kind: {kind}")


class Store:
    """Objects, a global resourceVersion, and the event history watches read from."""

    def __init__(
        self, namespaces: Iterable[str] = NAMESPACES, version: tuple[int, int] = (1, 31)
    ) -> None:
        self.version = version  # the Kubernetes version it answers as
        self.writes: list[str] = []  # "PATCH /api/v1/...": every write request, in order
        self.lock = threading.Condition()
        self.rv = 1
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name)
        self.history: dict[str, list[tuple[int, str, Obj]]] = {p: [] for p in KINDS}
        self.compacted = 0  # watches from before this resourceVersion get 410
        # Set: lists are answered; cleared (hold_lists): each list waits, as on a slow server.
        self.lists_open = threading.Event()
        self.lists_open.set()
        # Random, as kube-apiserver allocates them: nothing may count on a sequence.
        shuffle = random.Random().shuffle
        ports, ips = list(range(30000, 32768)), list(range(10, 60000))
        shuffle(ports)
        shuffle(ips)
        self._node_ports, self._cluster_ips = iter(ports), iter(ips)
        for name in namespaces:
            self.create("namespaces", "", {"metadata": {"name": name}})

    # -- writes (hold the lock) ----------------------------------------------------------
    def _record(self, plural: str, kind: str, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history[plural].append((self.rv, kind, copy.deepcopy(obj)))
        self.lock.notify_all()

    def create(
        self,
        plural: str,
        namespace: str,
        obj: Obj,
        *,
        manager: str = "",
        dry_run: bool = False,
        strict: bool = False,
    ) -> Obj:
        """Store ``obj`` (with ``dry_run``, only check that it could be: nothing is kept).
        ``strict``: validated as kube-apiserver does (every request over HTTP); tests that
        plant hostile objects call the store directly."""
        spec = KINDS[plural]
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError(422, "Invalid", f"{spec.kind} must have metadata.name")
        if spec.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise ApiError(400, "BadRequest", "the namespace of the object does not match")
            meta["namespace"] = namespace
        with self.lock:
            if spec.namespaced and ("namespaces", "", namespace) not in self.objects:
                raise ApiError(
                    404,
                    "NotFound",
                    f'namespaces "{namespace}" not found',
                    {"name": namespace, "kind": "namespaces"},
                )
            key = (plural, namespace if spec.namespaced else "", meta["name"])
            if key in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{plural} "{meta["name"]}" already exists',
                    {"name": meta["name"], "kind": plural},
                )
            if strict:
                validate(plural, obj, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta.pop("resourceVersion", None)
            if plural == "endpointslices":
                meta["generation"] = 1
            if plural == "events":
                obj.setdefault("eventTime", None)
            obj["kind"], obj["apiVersion"] = spec.kind, spec.api_version
            if plural == "services":
                self._default_service(obj)
            if plural == "namespaces":
                obj["status"] = {"phase": "Active"}
            meta["managedFields"] = _managed(  # a test planting an object names no manager
                [], manager, "", spec.api_version, field_set(_ABSENT, obj) if manager else None
            )
            if dry_run:
                return copy.deepcopy(obj)
            self.objects[key] = obj
            self._record(plural, "ADDED", obj)
            return copy.deepcopy(obj)

    def _default_service(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        kind = spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        n = next(self._cluster_ips)
        spec.setdefault("clusterIP", f"10.96.{n // 250}.{n % 250 + 1}")
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if kind == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        node_ports = kind == "NodePort" or (
            kind == "LoadBalancer" and spec["allocateLoadBalancerNodePorts"]
        )
        for port in spec.get("ports") or ():
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
            if node_ports and not port.get("nodePort"):
                port["nodePort"] = self._node_port()
        if kind in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if kind == "LoadBalancer" and spec["externalTrafficPolicy"] == "Local":
            spec.setdefault("healthCheckNodePort", self._node_port())
        obj["status"] = {"loadBalancer": {}}

    def _as_stored(self, plural: str, status: Obj) -> Obj:
        """A server older than 1.29 does not know ``ipMode``: its decoder drops it."""
        if plural != "services" or self.version >= (1, 29):
            return status
        status = copy.deepcopy(status)
        for item in (status.get("loadBalancer") or {}).get("ingress") or ():
            if isinstance(item, dict):
                item.pop("ipMode", None)
        return status

    def _retype_service(self, updated: Obj, current: Obj) -> None:
        """What kube-apiserver does to a Service whose type changes: leaving LoadBalancer
        drops the class, the node ports (to ClusterIP), the traffic policy and the health
        check port, and clears status.loadBalancer; coming to it allocates node ports, and so
        does adding a port to a NodePort or LoadBalancer Service."""
        spec, before = updated.setdefault("spec", {}), current.get("spec") or {}
        kind, was = spec.get("type", "ClusterIP"), before.get("type", "ClusterIP")
        if was == "LoadBalancer" and kind != "LoadBalancer":
            for field in (
                "loadBalancerClass",
                "allocateLoadBalancerNodePorts",
                "healthCheckNodePort",
                "loadBalancerIP",
            ):
                spec.pop(field, None)
            updated["status"] = {"loadBalancer": {}}
        if kind == "ClusterIP":
            spec.pop("externalTrafficPolicy", None)
            for port in spec.get("ports") or ():
                port.pop("nodePort", None)
        elif kind in ("NodePort", "LoadBalancer"):
            if kind != was:
                if kind == "LoadBalancer":
                    spec.setdefault("allocateLoadBalancerNodePorts", True)
                spec.setdefault("externalTrafficPolicy", "Cluster")
            # A port added by an update gets its node port as a created one does.
            if kind == "NodePort" or spec.get("allocateLoadBalancerNodePorts", True):
                for port in spec.get("ports") or ():
                    if not port.get("nodePort"):
                        port["nodePort"] = self._node_port()

    def _node_port(self) -> int:
        port = next(self._node_ports, None)
        if port is None:
            raise ApiError(
                422,
                "Invalid",
                'Service "" is invalid: spec.ports[0].nodePort: Internal error: failed to '
                "allocate a nodePort: range is full",
            )
        return port

    def get(self, plural: str, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                raise ApiError(
                    404, "NotFound", f'{plural} "{name}" not found', {"name": name, "kind": plural}
                )
            return copy.deepcopy(obj)

    def update(
        self,
        plural: str,
        namespace: str,
        name: str,
        new: Obj,
        *,
        subresource: str = "",
        manager: str = "",
        strict: bool = False,
    ) -> Obj:
        with self.lock:
            current = self.get(plural, namespace, name)
            wanted_rv = (new.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "kind": plural},
                )
            if KINDS[plural].status:
                if subresource == "status":
                    updated = dict(current, status=self._as_stored(plural, new.get("status", {})))
                else:
                    updated = dict(new, status=current.get("status", {}))
            else:
                updated = dict(new)
            meta = dict(updated.get("metadata") or {})
            for field in ("uid", "creationTimestamp", "namespace", "name", "resourceVersion"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            meta["managedFields"] = current["metadata"].get("managedFields") or []
            updated["metadata"] = meta
            updated["kind"], updated["apiVersion"] = current["kind"], current["apiVersion"]
            if plural == "services" and subresource != "status":  # before validation, as
                self._retype_service(updated, current)  # the server's update strategy does
            meta["managedFields"] = _managed(
                meta["managedFields"],
                manager,
                subresource,
                current["apiVersion"],
                field_set(current, updated) if manager else None,
            )
            if strict:
                validate(plural, updated, current)
            if plural == "endpointslices" and updated != current:
                meta["generation"] = int(current["metadata"].get("generation") or 1) + 1
            if updated == current:
                return current  # a no-op write changes nothing, not even resourceVersion
            self.objects[(plural, namespace, name)] = updated
            self._record(plural, "MODIFIED", updated)
            return copy.deepcopy(updated)

    def patch(
        self,
        plural: str,
        namespace: str,
        name: str,
        patch: Obj,
        *,
        subresource: str = "",
        manager: str = "",
        strict: bool = False,
    ) -> Obj:
        with self.lock:
            current = self.get(plural, namespace, name)
            merged = merge_patch(current, patch)
            merged.setdefault("metadata", {})["resourceVersion"] = (
                patch.get("metadata") or {}
            ).get("resourceVersion")
            return self.update(
                plural,
                namespace,
                name,
                merged,
                subresource=subresource,
                manager=manager,
                strict=strict,
            )

    def json_patch(
        self,
        plural: str,
        namespace: str,
        name: str,
        ops: Any,
        *,
        subresource: str = "",
        manager: str = "",
    ) -> Obj:
        """RFC 6902 on the stored object, then validated and stored as an update is."""
        with self.lock:
            current = self.get(plural, namespace, name)
            patched = json_patch(current, ops)
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "the patched object is not an object")
            # Its resourceVersion is the stored one, unless the patch changed it: then, as on
            # the API server, it is a precondition (409 Conflict when it is not the stored one).
            return self.update(
                plural,
                namespace,
                name,
                patched,
                subresource=subresource,
                manager=manager,
                strict=True,
            )

    def delete(self, plural: str, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.get(plural, namespace, name)
            del self.objects[(plural, namespace, name)]
            self._record(plural, "DELETED", obj)
            return obj

    def list(self, plural: str, namespace: str | None, limit: int = 0, token: str = "") -> Obj:
        """A list, paged with limit/continue like kube-apiserver (pages after the first are
        read from the live store, not from a snapshot at the first page's version: the
        watch that follows replays whatever changed in between)."""
        spec = KINDS[plural]
        with self.lock:
            version, after = str(self.rv), None
            if token:
                try:
                    state = json.loads(base64.urlsafe_b64decode(token.encode()))
                    version, after = state["rv"], tuple(state["after"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token") from None
            keys = sorted(
                k
                for k in self.objects
                if k[0] == plural
                and (namespace is None or k[1] == namespace)
                and (after is None or k > after)
            )
            page = keys[:limit] if limit else keys
            items = []
            for key in page:
                item = {
                    k: v for k, v in self.objects[key].items() if k not in ("kind", "apiVersion")
                }
                items.append(copy.deepcopy(item))
            meta: Obj = {"resourceVersion": version}
            if limit and len(keys) > limit:
                meta["continue"] = base64.urlsafe_b64encode(
                    json.dumps({"rv": version, "after": list(page[-1])}).encode()
                ).decode()
                meta["remainingItemCount"] = len(keys) - limit
            return {
                "kind": f"{spec.kind}List",
                "apiVersion": spec.api_version,
                "metadata": meta,
                "items": items,
            }

    def compact(self) -> None:
        """Forget history, like etcd compaction: older watches get 410 Gone."""
        with self.lock:
            self.compacted = self.rv


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; with Nagle on, the client's delayed ACK
    # adds 40 ms to every request (a Go API server writes once).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ------------------------------------------------------------------------
    def _send_json(self, code: int, body: Obj) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid JSON: {exc}") from None

    def _body(self) -> Obj:
        body = self._json_body()
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        return body

    def _route(self) -> tuple[str, str | None, str | None, str, dict[str, list[str]]]:
        """(plural, namespace, name, subresource, query) from the path."""
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            rest = parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find {url.path}")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in KINDS:
            raise ApiError(404, "NotFound", f"the server could not find {url.path}")
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and not (sub == "status" and KINDS[plural].status):
            raise ApiError(404, "NotFound", f"the server could not find {url.path}")
        return plural, namespace, name, sub, parse_qs(url.query)

    def _authorised(self) -> bool:
        token = self.server.token
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            self._send_json(401, ApiError(401, "Unauthorized", "Unauthorized").status())
            return False
        return True

    def _handle(self, method: str) -> None:
        self.server.requests += 1
        failing = self.server.fail_with
        if failing is not None:  # as kube-apiserver under a storm (429) or a broken etcd (500)
            error = ApiError(failing[0], failing[1], f"the stand-in answers {failing[0]}")
            self._send_json(failing[0], error.status())
            return
        if method != "GET":
            self.server.store.writes.append(f"{method} {urlparse(self.path).path}")
        if not self._authorised():
            return
        if method == "GET" and urlparse(self.path).path in ("/readyz", "/livez", "/healthz"):
            self.send_response(200)  # as kube-apiserver: plain text, "ok"
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        try:
            plural, namespace, name, sub, query = self._route()
            if self.server.rbac is not None:
                self.server.rbac.check(_verb(method, name, query), plural, sub, namespace)
            store = self.server.store
            ns = namespace or ""
            # As kube-apiserver: the writer named by ?fieldManager=, else by its User-Agent
            # (up to the first /), is recorded in metadata.managedFields.
            agent = (self.headers.get("User-Agent") or "").split("/")[0]
            manager = query.get("fieldManager", [agent])[0]
            if method == "GET" and name is None:
                if query.get("watch", [""])[0] in ("true", "1"):
                    self._watch(plural, namespace, query)
                    return
                limit = int(query.get("limit", ["0"])[0] or 0)
                token = query.get("continue", [""])[0]
                store.lists_open.wait(120)
                self._send_json(200, store.list(plural, namespace, limit, token))
            elif method == "GET":
                self._send_json(200, store.get(plural, ns, name))  # type: ignore[arg-type]
            elif method == "POST" and name is None:
                dry = query.get("dryRun", [""])[0] == "All"
                made = store.create(
                    plural, ns, self._body(), manager=manager, dry_run=dry, strict=True
                )
                self._send_json(201, made)
            elif method == "PUT" and name:
                body = self._body()
                if not (body.get("metadata") or {}).get("resourceVersion"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f'{KINDS[plural].kind} "{name}" is invalid: '
                        "metadata.resourceVersion: Invalid value: 0x0: must be "
                        "specified for an update",
                    )
                done = store.update(
                    plural, ns, name, body, subresource=sub, manager=manager, strict=True
                )
                self._send_json(200, done)
            elif method == "PATCH" and name:
                kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                # Server-side apply (application/apply-patch+yaml) is not served: without
                # field ownership and its conflicts (409) it would be kinder than the API
                # server. The director never applies.
                if kind not in (
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                    "application/json-patch+json",
                ):
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        f"the body of the request was in an unknown format - accepted media "
                        f"types include: application/json-patch+json, "
                        f"application/merge-patch+json, "
                        f'application/strategic-merge-patch+json (got "{kind}")',
                    )
                if kind == "application/json-patch+json":
                    done = store.json_patch(
                        plural, ns, name, self._json_body(), subresource=sub, manager=manager
                    )
                else:
                    done = store.patch(
                        plural,
                        ns,
                        name,
                        self._body(),
                        subresource=sub,
                        manager=manager,
                        strict=True,
                    )
                self._send_json(200, done)
            elif method == "DELETE" and name:
                self._send_json(200, store.delete(plural, ns, name))
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
        except ApiError as exc:
            self._send_json(exc.code, exc.status())

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- watch ---------------------------------------------------------------------------
    def _chunk(self, body: Obj) -> None:
        data = json.dumps(body, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, plural: str, namespace: str | None, query: dict[str, list[str]]) -> None:
        store = self.server.store
        spec = KINDS[plural]
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(query.get("timeoutSeconds", ["1800"])[0])
        bookmarks = query.get("allowWatchBookmarks", [""])[0] == "true"
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.server.watches.add(self.connection)
        try:
            with store.lock:
                expired = since < store.compacted
            if expired:
                error = ApiError(
                    410, "Expired", f"too old resource version: {since} ({store.compacted})"
                )
                self._chunk({"type": "ERROR", "object": error.status()})
            else:
                self._stream(plural, spec, namespace, since, deadline=deadline, bookmarks=bookmarks)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass
        finally:
            self.server.watches.discard(self.connection)
            self.close_connection = True

    def _stream(
        self,
        plural: str,
        spec: Kind,
        namespace: str | None,
        since: int,
        *,
        deadline: float,
        bookmarks: bool,
    ) -> None:
        store = self.server.store
        history = store.history[plural]
        with store.lock:
            position = next((i for i, (rv, _, _) in enumerate(history) if rv > since), len(history))
        last_bookmark, final_sent = time.monotonic(), False
        while time.monotonic() < deadline and not self.server.closing:
            with store.lock:
                if position >= len(history):
                    store.lock.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
                pending = history[position:]
                position = len(history)
                current_rv = store.rv
            for _rv, kind, obj in pending:
                if namespace is None or obj["metadata"].get("namespace") == namespace:
                    self._chunk({"type": kind, "object": obj})
            now = time.monotonic()
            # As kube-apiserver: a bookmark about once a minute and one 2 s before the
            # deadline, and none for a resource with no writes since the server started.
            due = now - last_bookmark >= self.server.bookmark_seconds or (
                not final_sent and deadline - now <= 2.0
            )
            if bookmarks and due and history:
                final_sent = final_sent or deadline - now <= 2.0
                last_bookmark = now
                self._chunk(
                    {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": spec.kind,
                            "apiVersion": spec.api_version,
                            "metadata": {"resourceVersion": str(current_rv)},
                        },
                    }
                )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], store: Store, token: str) -> None:
        super().__init__(address, _Handler)
        self.store, self.token = store, token
        self.rbac: Rbac | None = None
        self.watches: set[socket.socket] = set()
        self.closing = False
        self.requests = 0
        self.bookmark_seconds = 60.0
        self.fail_with: tuple[int, str] | None = None  # every request answered so (a fault)


class Rbac:
    """RBAC as kube-apiserver applies it to one ServiceAccount: the rules of the ClusterRoles
    bound by ClusterRoleBindings hold everywhere, a Role bound by a RoleBinding in its own
    namespace. Read from manifests (``deploy/kubernetes/rbac.yaml``). Remembers what it
    allowed and refused, so a test can check that a role is enough and that every rule of it
    is used."""

    def __init__(self, documents: list[Obj], namespace: str, name: str) -> None:
        self.user = f"system:serviceaccount:{namespace}:{name}"
        subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        roles = {
            (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
            for d in documents
            if d.get("kind") in ("ClusterRole", "Role")
        }
        # (namespace or "" for cluster-wide, apiGroup, resource, verb)
        self.grants: set[tuple[str, str, str, str]] = set()
        for binding in documents:
            if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            if subject not in binding.get("subjects", []):
                continue
            scope = binding["metadata"].get("namespace", "")
            ref = binding["roleRef"]
            role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else "", ref["name"]))
            if role is None:
                raise ValueError(f"{binding['metadata']['name']}: no {ref['kind']} {ref['name']}")
            for rule in role.get("rules", []):
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            self.grants.add((scope, group, resource, verb))
        self.used: set[tuple[str, str, str, str]] = set()
        self.refused: list[str] = []

    @classmethod
    def from_file(cls, path: Path, namespace: str, name: str) -> Rbac:
        import yaml

        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        return cls(docs, namespace, name)

    def check(self, verb: str, plural: str, sub: str, namespace: str | None) -> None:
        group = KINDS[plural].group
        resource = f"{plural}/{sub}" if sub else plural
        for scope in ("", namespace or ""):
            if (scope, group, resource, verb) in self.grants:
                self.used.add((scope, group, resource, verb))
                return
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        message = (
            f'{plural} is forbidden: User "{self.user}" cannot {verb} resource "{resource}" '
            f'in API group "{group}" {where}'
        )
        self.refused.append(message)
        raise ApiError(403, "Forbidden", message, {"group": group, "kind": plural})


def _verb(method: str, name: str | None, query: dict[str, list[str]]) -> str:
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if query.get("watch", [""])[0] in ("true", "1") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]


class FakeApiServer:
    """The stand-in, listening on 127.0.0.1 (or ``host``) on a free port. With ``rbac``, every
    request of the token's user is authorised against those rules (403 ``Forbidden``)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        token: str = "test-token",
        rbac: Rbac | None = None,
        namespaces: Iterable[str] = NAMESPACES,
        version: tuple[int, int] = (1, 31),
    ) -> None:
        self.host, self.token, self.rbac = host, token, rbac
        self.store = Store(namespaces, version)
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeApiServer:
        self._server = _Server((self.host, self.port), self.store, self.token)
        self._server.rbac = self.rbac
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        server.closing = True
        server.shutdown()
        server.server_close()
        for conn in list(server.watches):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        with self.store.lock:
            self.store.lock.notify_all()
        self._server = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def failing(self, code: int, reason: str) -> Iterator[None]:
        """Every request answered ``code`` for the duration (429 TooManyRequests when API
        priority and fairness sheds load, 500 InternalError from a broken etcd); the open
        watches are cut, and their clients meet the same answer when they come back."""
        server = self._server
        assert server is not None
        server.fail_with = (code, reason)
        for conn in list(server.watches):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        try:
            yield
        finally:
            server.fail_with = None

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """Off the network for the duration (same port afterwards). As a restarted
        kube-apiserver, it comes back with its watch cache at the current revision: every
        watch resumed from an older one gets 410 Expired (and its client relists)."""
        self.stop()
        try:
            yield
        finally:
            with self.store.lock:
                self.store.compacted = self.store.rv
            self.start()

    def hold_lists(self, held: bool = True) -> None:
        """Every list (each page of it) waits until ``hold_lists(False)``: a server slow to
        answer lists, for as long as a test needs one under way."""
        if held:
            self.store.lists_open.clear()
        else:
            self.store.lists_open.set()

    def expire_watches(self) -> None:
        """Every watch cut, and the history behind it compacted: each client's watch comes
        back to 410 Expired and relists everything (what an etcd compaction, or a restarted
        kube-apiserver with a cold watch cache, does to every client)."""
        with self.store.lock:
            self.store.rv += 1  # past every version a client holds (a bookmark's too)
            self.store.compacted = self.store.rv
        server = self._server
        for conn in list(server.watches) if server is not None else ():
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    @property
    def requests(self) -> int:
        return self._server.requests if self._server else 0

    def rotate_token(self, token: str) -> None:
        """A new bearer token from now on; the old one is answered 401 (a bound
        ServiceAccount token that expired and was replaced)."""
        self.token = token
        if self._server is not None:
            self._server.token = token

    def kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {"server": self.url}}],
            "users": [{"name": "director", "user": {"token": self.token}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "director"}}],
            "current-context": "lab",
        }
        path.write_text(json.dumps(config))
        return path

    # -- playing the cluster --------------------------------------------------------------
    def create(self, plural: str, obj: Obj, namespace: str = "default") -> Obj:
        return self.store.create(plural, namespace if KINDS[plural].namespaced else "", obj)

    def get(self, plural: str, name: str, namespace: str = "default") -> Obj:
        return self.store.get(plural, namespace if KINDS[plural].namespaced else "", name)

    def patch(
        self, plural: str, name: str, patch: Obj, namespace: str = "default", subresource: str = ""
    ) -> Obj:
        ns = namespace if KINDS[plural].namespaced else ""
        return self.store.patch(plural, ns, name, patch, subresource=subresource)

    def delete(self, plural: str, name: str, namespace: str = "default") -> Obj:
        return self.store.delete(plural, namespace if KINDS[plural].namespaced else "", name)

    def events_for(self, name: str, namespace: str = "default") -> list[Obj]:
        listing = self.store.list("events", namespace)["items"]
        return [e for e in listing if e["involvedObject"]["name"] == name]


# -- object builders for tests -----------------------------------------------------------
def service(
    name: str,
    ports: list[tuple[str, str, int]],  # (name, protocol, port)
    *,
    type: str = "LoadBalancer",
    lb_class: str | None = "lvs-director.io/ipvs",
    annotations: dict[str, str] | None = None,
    families: tuple[str, ...] = ("IPv4",),
    etp: str | None = None,
    affinity: int | None = None,
) -> Obj:
    spec: Obj = {
        "type": type,
        "ports": [
            {"name": n, "protocol": p, "port": port, "targetPort": port} for n, p, port in ports
        ],
        "selector": {"app": name},
        "ipFamilies": list(families),
        "ipFamilyPolicy": "SingleStack" if len(families) == 1 else "RequireDualStack",
    }
    if lb_class and type == "LoadBalancer":
        spec["loadBalancerClass"] = lb_class
    if etp:
        spec["externalTrafficPolicy"] = etp
    if affinity is not None:
        spec["sessionAffinity"] = "ClientIP"
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": affinity}}
    return {"metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": spec}


def endpoint_slice(
    service_name: str,
    endpoints: Sequence[tuple[str, str | None, bool, bool]],  # (address, node, ready, terminating)
    ports: list[tuple[str, str, int]],
    *,
    name: str | None = None,
    address_type: str = "IPv4",
) -> Obj:
    return {
        "metadata": {
            "name": name or f"{service_name}-abcde",
            "labels": {
                "kubernetes.io/service-name": service_name,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": address_type,
        "endpoints": [
            {
                "addresses": [address],
                "conditions": {
                    "ready": ready and not terminating,
                    "serving": ready,
                    "terminating": terminating,
                },
                **({"nodeName": node} if node else {}),
            }
            for address, node, ready, terminating in endpoints
        ],
        "ports": [{"name": n, "protocol": p, "port": port} for n, p, port in ports],
    }


def node(
    name: str, address: str, *, ready: bool = True, labels: dict[str, str] | None = None
) -> Obj:
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
        },
    }
