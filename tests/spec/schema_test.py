#!/usr/bin/env python3
"""schema/spec.schema.json against the example specs and against the parser,
one case per ctest test.

Usage: schema_test.py SPEC_CHECK SOURCE_DIR CASE

SPEC_CHECK is the spec_check helper (tests/spec/spec_check.cc): it runs the
parser on a JSON array of spec texts and says, for each, "ok" or the error.
The contract checked here: every spec the schema rejects, the parser rejects;
every structural error the parser reports (a wrong JSON type, a missing or
unknown key), the schema reports too. Semantic errors (an unknown mesh, an
array whose length must match another's, ...) may pass the schema: the bad
cases of tests/spec/spec_cases.json list each such case with the reason.
"""
import copy
import glob
import json
import os
import re
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:
    sys.exit("FAIL: the Python module jsonschema is missing: install python3-jsonschema "
             "(scripts/deps.sh)")

SPEC_CHECK, SRC, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
with open(os.path.join(SRC, "schema", "spec.schema.json")) as f:
    SCHEMA = json.load(f)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
with open(os.path.join(SRC, "tests", "spec", "spec_cases.json")) as f:
    CASES = json.load(f)

# A parser message about the shape of the document rather than its meaning.
STRUCTURAL = re.compile(r'^\S+: (expected .*, got |missing required key |unknown key |'
                        r'missing "mesh" \(with "spec"\) or "boxes"|give either "mesh")')


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def parse(texts):
    """The parser's verdict on each text: {"code": "ok" | error code, ...}."""
    p = subprocess.run([SPEC_CHECK], input=json.dumps(texts), capture_output=True, text=True,
                       timeout=300)
    check(p.returncode == 0, f"spec_check exited {p.returncode}: {p.stderr}")
    results = json.loads(p.stdout)
    check(len(results) == len(texts), "spec_check answered for the wrong number of texts")
    return results


def schema_errors(doc):
    return list(VALIDATOR.iter_errors(doc))


def parser_path(message):
    """The JSON path a parser message starts with, as a list of keys and
    indices: 'tensors[0].src.spec[1]: ...' -> ['tensors', 0, 'src', 'spec', 1]."""
    out, i = [], 0
    if message.startswith("(root)"):
        return out
    decoder = json.JSONDecoder()
    while i < len(message) and message[i] != ":":
        if message[i] == ".":
            i += 1
        elif message[i] == "[" and message[i + 1] == '"':  # ["key"]
            key, end = decoder.raw_decode(message, i + 1)
            out.append(key)
            i = end + 1
        elif message[i] == "[":  # [index]
            end = message.index("]", i)
            out.append(int(message[i + 1:end]))
            i = end + 1
        else:
            m = re.match(r"[A-Za-z0-9_\-]+", message[i:])
            check(m is not None, f"cannot read the path of: {message}")
            out.append(m.group(0))
            i += len(m.group(0))
    return out


def case_document(case):
    """(document or None, text) of a case of spec_cases.json."""
    if "text" in case:
        try:
            return json.loads(case["text"]), case["text"]
        except ValueError:
            return None, case["text"]
    doc = case["spec"] if "spec" in case else dict(CASES["base"], **case["patch"])
    return doc, json.dumps(doc)


def spec_files():
    """Every example spec, and every JSON file under tests/ that is a spec (an
    object with "tensors")."""
    files = sorted(glob.glob(os.path.join(SRC, "examples", "specs", "*.json")))
    for path in sorted(glob.glob(os.path.join(SRC, "tests", "**", "*.json"), recursive=True)):
        with open(path) as f:
            try:
                doc = json.load(f)
            except ValueError:
                continue
        if isinstance(doc, dict) and "tensors" in doc:
            files.append(path)
    return files


# ---------------------------------------------------------------- cases

def case_schema_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    # Every object schema lists its keys with a description, and says
    # whether other keys are allowed: what the parser's check_keys does.
    def walk(node, where):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                check(node.get("additionalProperties") is False, f"{where}: other keys allowed")
                for key, sub in node["properties"].items():
                    check("description" in sub or "$ref" in sub and "description" in
                          resolve(sub["$ref"]), f"{where}.{key}: no description")
            for k, v in node.items():
                walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")
    walk(SCHEMA, "schema")


def resolve(ref):
    node = SCHEMA
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


def case_examples():
    files = spec_files()
    check(len(files) >= 6, f"only {len(files)} spec files found")
    docs, texts = [], []
    for path in files:
        with open(path) as f:
            texts.append(f.read())
        docs.append(json.loads(texts[-1]))
    t0 = time.process_time()
    for path, doc in zip(files, docs):
        errors = schema_errors(doc)
        check(not errors, f"{path} does not validate: " +
              "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:3]))
    # CPU seconds, not wall time: a loaded machine must not fail the test.
    seconds = time.process_time() - t0
    # The fleet-scale examples list 1024 devices per mesh: still seconds.
    check(seconds < 10, f"validating {len(files)} specs took {seconds:.1f} s of CPU")
    for path, r in zip(files, parse(texts)):
        check(r["code"] == "ok", f"{path}: the parser rejects it: {r.get('message')}")
    print(f"{len(files)} spec files validate in {seconds:.2f} s of CPU and parse")


def case_good_cases():
    docs = [case_document(c) for c in CASES["good"]]
    for case, (doc, _) in zip(CASES["good"], docs):
        check(doc is not None, f"good case {case['name']} is not JSON")
        errors = schema_errors(doc)
        check(not errors, f"good case {case['name']}: schema rejects it: {errors[0].message}"
              if errors else "")
    for case, r in zip(CASES["good"], parse([t for _, t in docs])):
        check(r["code"] == "ok", f"good case {case['name']}: parser rejects it: {r.get('message')}")
    print(f"{len(docs)} good cases: schema and parser accept them")


def case_bad_cases():
    docs = [case_document(c) for c in CASES["bad"]]
    results = parse([t for _, t in docs])
    semantic = 0
    for case, (doc, _), r in zip(CASES["bad"], docs, results):
        name = case["name"]
        check(r["code"] == case["code"], f"{name}: parser says {r}, expected {case['code']}")
        check(r["message"].startswith(case["message"]), f"{name}: parser says {r['message']}")
        if doc is None:
            check(r["code"] == "parse_error", f"{name}: not JSON, but the parser says {r}")
            continue
        errors = schema_errors(doc)
        if "semantic_only" in case:
            semantic += 1
            check(not STRUCTURAL.match(r["message"]),
                  f"{name}: marked semantic-only, but the parser's error is structural: "
                  f"{r['message']}")
            check(not errors, f"{name}: marked semantic-only ({case['semantic_only']}), but the "
                  f"schema rejects it: {errors[0].message if errors else ''}")
            continue
        check(errors, f"{name}: the parser rejects it ({r['message']}) but the schema accepts "
              "it (a semantic-only case needs \"semantic_only\": reason)")
        # The schema objects at or above the value the parser names.
        path = parser_path(r["message"])
        check(any(list(e.absolute_path) == path[:len(e.absolute_path)] for e in errors),
              f"{name}: the parser names {path}, the schema "
              f"{[list(e.absolute_path) for e in errors]}")
    print(f"{len(docs)} bad cases: the parser rejects each; the schema rejects all but "
          f"{semantic} semantic-only ones")


# One value of each JSON type, and integers just past the 32- and 64-bit
# bounds (a list or object of the wrong content comes from the mutations of
# its items and keys).
REPLACEMENTS = [None, True, "x", "", -1, 2.5, 2**31, 2**63, [], {}]


def mutations(doc):
    """Documents that differ from doc in one place."""
    def at(root, path):
        for p in path:
            root = root[p]
        return root

    def nodes(node, path):
        yield path, node
        if isinstance(node, dict):
            for k, v in node.items():
                yield from nodes(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node[:3]):  # long device lists: the first few
                yield from nodes(v, path + [i])

    for path, node in list(nodes(doc, [])):
        if path:
            for value in REPLACEMENTS:
                if value == node and type(value) is type(node):
                    continue
                m = copy.deepcopy(doc)
                at(m, path[:-1])[path[-1]] = copy.deepcopy(value)
                yield m
        if isinstance(node, dict):
            for k in node:
                m = copy.deepcopy(doc)
                del at(m, path)[k]
                yield m
            m = copy.deepcopy(doc)
            at(m, path)["bogus"] = 1
            yield m
        elif isinstance(node, list) and node:
            m = copy.deepcopy(doc)
            at(m, path).pop()
            yield m
            m = copy.deepcopy(doc)
            at(m, path).append(copy.deepcopy(node[0]))
            yield m


def case_mutations():
    seeds = [case_document(c)[0] for c in CASES["good"]]
    for name in ("partial_sums", "explicit_boxes"):
        with open(os.path.join(SRC, "examples", "specs", name + ".json")) as f:
            seeds.append(json.load(f))
    docs = [m for seed in seeds for m in mutations(seed)]
    t0 = time.monotonic()
    results = parse([json.dumps(d) for d in docs])
    counts = {"both reject": 0, "both accept": 0, "only the parser rejects (semantic)": 0}
    for doc, r in zip(docs, results):
        if not VALIDATOR.is_valid(doc):  # much faster than collecting the errors
            if r["code"] == "ok":
                e = schema_errors(doc)[0]
                check(False, "the schema rejects a spec the parser accepts: "
                      f"{e.message} at {list(e.absolute_path)} in {json.dumps(doc)}")
            counts["both reject"] += 1
        elif r["code"] != "ok":
            check(not STRUCTURAL.match(r["message"]),
                  f"the parser reports a structural error the schema misses: {r['message']} "
                  f"in {json.dumps(doc)}")
            counts["only the parser rejects (semantic)"] += 1
        else:
            counts["both accept"] += 1
    print(f"{len(docs)} one-change mutations of {len(seeds)} specs in "
          f"{time.monotonic() - t0:.1f} s: {counts}")


def case_dtypes():
    # The names the parser lists when it rejects a dtype are its canonical
    # ones: each is in the schema's enum, and every enum name, in any case,
    # is accepted by both.
    base = CASES["base"]

    def with_dtype(name):
        doc = copy.deepcopy(base)
        doc["tensors"][0]["dtype"] = name
        return doc

    r = parse([json.dumps(with_dtype("nope"))])[0]
    m = re.search(r"\(expected one of: ([^)]*)\)", r.get("message", ""))
    check(m is not None, f"no list of dtypes in: {r}")
    canonical = m.group(1).split()
    enum = resolve("#/$defs/dtype")["anyOf"][0]["enum"]
    for name in canonical:
        check(name in enum, f"dtype {name} is missing from the schema's enum")
    names = [v for n in enum for v in (n, n.upper(), n.capitalize())]
    for name, r in zip(names, parse([json.dumps(with_dtype(n)) for n in names])):
        check(r["code"] == "ok", f"the parser rejects dtype {name}: {r}")
        check(not schema_errors(with_dtype(name)), f"the schema rejects dtype {name}")
    for bad in ("f31", "bf", "float", " f32", "f32 "):
        check(schema_errors(with_dtype(bad)), f"the schema accepts dtype {bad!r}")
    print(f"{len(canonical)} dtypes, {len(enum)} names with aliases, in three letter cases")


def case_defaults():
    # The schema's option defaults are the parser's.
    options = resolve("#/$defs/options")["properties"]
    r = parse([json.dumps(CASES["base"])])[0]
    check(r["code"] == "ok", str(r))
    check(set(options) == set(r["options"]), f"options differ: {sorted(options)} vs "
          f"{sorted(r['options'])}")
    for key, value in r["options"].items():
        check(options[key].get("default") == value,
              f"options.{key}: schema default {options[key].get('default')}, parser {value}")
    print("option defaults agree:", r["options"])


CASES_BY_NAME = {name[len("case_"):]: fn for name, fn in globals().items()
                 if name.startswith("case_")}

if __name__ == "__main__":
    if CASE not in CASES_BY_NAME:
        sys.exit(f"unknown case {CASE}; cases: {', '.join(CASES_BY_NAME)}")
    CASES_BY_NAME[CASE]()
    print("ok:", CASE)
