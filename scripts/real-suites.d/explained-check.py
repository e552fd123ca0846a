#!/usr/bin/env python3
"""The checks of `scripts/real-suites --explained`, one subcommand each. Each prints one line
saying what it expected and what it found, and exits 0 (as expected) or 1.

  names KIND SUB WHAT STDERR REPORT [never]
      sandbox-run named the cause: a stderr line `sandbox-run: refused KIND SUB: ...WHAT...`
      (or, past stderr's first 10 lines, its `... and N more`) and an entry of the report's
      `results[].denials` with that kind and sub whose `what` holds WHAT; with `never`, that entry's fix says `never: ...` and its patch is null.
  adds BASE_SHOWN PROFILE_SHOWN CHANGE...
      a profile adds exactly CHANGE... to its base: both are `sandbox-run profiles show`
      outputs (resolved TOML); CHANGE is `table.key=VALUE` for a value that changed
      (VALUE as TOML: `true`, `"host"`) or `table.key+=ITEM` for an item a list gained; a
      CHANGE written `?CHANGE` may be there or not (another file the program reads first,
      for the same purpose). Nothing else may differ (the description aside).
"""

import json
import re
import sys
import tomllib


def names(kind, sub, what, stderr_file, report_file, never=None):
    with open(stderr_file, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    pat = re.compile(r"^sandbox-run: refused " + re.escape(kind) + " " + re.escape(sub) + r": (.*)$")
    on_stderr = [l for l in lines if (m := pat.match(l)) and what in m.group(1)]
    if kind == "gate":
        # the gate's own line: `sandbox-run: denied by rule SUB: ...`
        gate = re.compile(r"^sandbox-run: denied by rule " + re.escape(sub) + r": (.*)$")
        on_stderr += [l for l in lines if (m := gate.match(l)) and what in m.group(1)]
    in_report = []
    try:
        with open(report_file, encoding="utf-8") as f:
            report = json.load(f)
        for r in report.get("results", []):
            for d in r.get("denials", []):
                if d.get("kind") == kind and d.get("sub") == sub and what in str(d.get("what", "")):
                    if never and (d.get("patch") is not None or not str(d.get("fix", "")).startswith("never")):
                        print(f"names: a cause no profile may allow, yet the report offers a fix: {json.dumps(d)}")
                        return 1
                    in_report.append(d)
    except (OSError, ValueError) as e:
        print(f"names: the report {report_file} is unreadable: {e}")
    want = f"`sandbox-run: refused {kind} {sub}: ...{what}...`"
    # stderr shows the first 10 and then "... and N more refusals (see the report)"
    more = [l for l in lines if re.match(r"^sandbox-run: \.\.\. and [0-9]+ more", l)]
    if in_report and more and not on_stderr:
        print(f"named in the report, past stderr's first 10: {json.dumps(in_report[0])}")
        return 0
    if on_stderr and in_report:
        print(f"named: {on_stderr[0]}")
        return 0
    refused = [l for l in lines if l.startswith("sandbox-run: refused ")]
    seen = "; ".join(refused[:5]) or "no `sandbox-run: refused` line"
    missing = []
    if not on_stderr:
        missing.append(f"stderr line {want}")
    if not in_report:
        missing.append(f'report denial {{"kind": "{kind}", "sub": "{sub}", "what": "...{what}..."}}')
    print(f"not named: expected {' and '.join(missing)}; stderr had: {seen}")
    return 1


def flat(doc):
    """{"table.key": value} of a resolved profile, without its description."""
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                out[f"{k}.{k2}"] = v2
        elif k not in ("description", "extends"):
            out[k] = v
    return out


def toml_value(v):
    return tomllib.loads(f"v = {v}")["v"]


def adds(base_file, shown_file, changes):
    with open(base_file, "rb") as f:
        base = flat(tomllib.load(f))
    with open(shown_file, "rb") as f:
        got = flat(tomllib.load(f))
    diff = set()
    for key in sorted(set(base) | set(got)):
        b, g = base.get(key), got.get(key)
        if b == g:
            continue
        if isinstance(b, list) and isinstance(g, list):
            for item in g:
                if item not in b:
                    diff.add(f"{key}+={json.dumps(item)}")
            for item in b:
                if item not in g:
                    diff.add(f"{key}-={json.dumps(item)}")
        else:
            diff.add(f"{key}={json.dumps(g)}")
    want, may = set(), set()
    for c in changes:
        m = re.match(r"^(\??)([a-z_.]+)(\+?=)(.*)$", c)
        if not m:
            print(f"adds: bad change {c!r}")
            return 1
        (may if m.group(1) else want).add(f"{m.group(2)}{m.group(3)}{json.dumps(toml_value(m.group(4)))}")
    if want <= diff <= want | may:
        print(f"adds only: {', '.join(sorted(diff)) or 'nothing'}")
        return 0
    extra = sorted(diff - want - may)
    lacking = sorted(want - diff)
    print(
        f"expected it to add only {', '.join(sorted(want)) or 'nothing'}; "
        f"it also changes: {', '.join(extra) or 'nothing'}; it lacks: {', '.join(lacking) or 'nothing'}"
    )
    return 1


def main(argv):
    if len(argv) >= 6 and argv[1] == "names":
        return names(*argv[2:8])
    if len(argv) >= 4 and argv[1] == "adds":
        return adds(argv[2], argv[3], argv[4:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
