#!/usr/bin/env bash
# Reads apt's source entries and picks the Debian mirror in use, for
# scripts/offline-deps.sh (which adds a deb-src entry for it) and
# scripts/fresh-check.sh (which debootstraps from it). Reads only; tested
# against fake roots by scripts/test-setup.sh.
#
#   bash scripts/apt-sources.sh [--root DIR] entries   every enabled entry, one a line:
#                                                      TYPE URI SUITES COMPONENTS SIGNED-BY FILE (tab-separated)
#   bash scripts/apt-sources.sh [--root DIR] mirror    the Debian archive's URI
#   bash scripts/apt-sources.sh [--root DIR] deb-src   a deb822 deb-src paragraph for it
#
# The root (default $RESHARD_APT_ROOT, else /) is where etc/apt and
# etc/os-release are read from. apt reads etc/apt/sources.list (one-line
# format) and then etc/apt/sources.list.d/*.list (one-line) and *.sources
# (deb822: "Types:", "URIs:", "Suites:", "Components:", "Enabled: no",
# "Signed-By:") in name order; files with other names (foo.list.disabled)
# are ignored, and so is each missing file: Debian 12 installs only
# sources.list.d/debian.sources, older systems only sources.list.
#
# The mirror is the URI of the first enabled `deb` entry that has the
# release's own suite (VERSION_CODENAME of etc/os-release, e.g. bookworm)
# and the component main. That skips the security archive (suite
# bookworm-security), third-party repositories (their own suites or
# components), commented-out lines and "Enabled: no" paragraphs.
#
# Exit status: 0; 1 when `mirror` finds no such entry (the message says what
# was read); 2 on bad usage. `deb-src` without a mirror falls back to
# http://deb.debian.org/debian and says so on stderr.
set -Eeuo pipefail
shopt -s inherit_errexit
ME=${0##*/}
DEFAULT_MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

usage() {
  echo "usage: bash scripts/apt-sources.sh [--root DIR] entries|mirror|deb-src" >&2
  exit 2
}
ROOT=${RESHARD_APT_ROOT:-/}
while (($#)); do
  case $1 in
    --root)
      (($# >= 2)) || usage
      ROOT=$2
      shift 2
      ;;
    entries | mirror | deb-src)
      CMD=$1
      shift
      ;;
    *) usage ;;
  esac
done
[[ -n ${CMD:-} ]] || usage
[[ -d $ROOT ]] || {
  echo "$ME: root $ROOT is not a directory" >&2
  exit 2
}
ROOT=${ROOT%/}
APT=$ROOT/etc/apt

# The files apt reads, in apt's order; only those that exist.
source_files() {
  local f
  [[ -f $APT/sources.list ]] && echo "$APT/sources.list"
  for f in "$APT"/sources.list.d/*; do
    [[ -f $f && ($f == *.list || $f == *.sources) ]] && echo "$f"
  done
  return 0
}

# Every enabled entry as TYPE<TAB>URI<TAB>SUITES<TAB>COMPONENTS<TAB>SIGNED-BY<TAB>FILE
# (lists space-separated; SIGNED-BY "-" when absent, "inline" for an
# embedded key block). mawk-compatible: a minimal Debian has no gawk.
entries() {
  local files
  files=$(source_files)
  [[ -n $files ]] || return 0
  # shellcheck disable=SC2086 # one file a line, no spaces in apt's names
  awk -v OFS='\t' '
    function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
    function squeeze(s) { s = trim(s); gsub(/[ \t\n]+/, " ", s); return s }
    function emit(types, uris, suites, comps, signed, file,   nt, nu, t, u, tl, ul) {
      nt = split(types, tl, " "); nu = split(uris, ul, " ")
      for (t = 1; t <= nt; t++) for (u = 1; u <= nu; u++)
        print tl[t], ul[u], suites, comps, (signed == "" ? "-" : signed), file
    }
    # deb822: one paragraph of fields, ended by a blank line or the file end.
    function flush_paragraph(   signed) {
      if (nfields && tolower(f["enabled"]) != "no" && f["types"] != "" && f["uris"] != "") {
        signed = f["signed-by"]
        if (signed ~ /\n/ || signed ~ /BEGIN PGP/) signed = "inline"
        emit(squeeze(f["types"]), squeeze(f["uris"]), squeeze(f["suites"]),
             squeeze(f["components"]), squeeze(signed), para_file)
      }
      split("", f); nfields = 0; last = ""
    }
    FNR == 1 { if (deb822) flush_paragraph(); deb822 = (FILENAME ~ /\.sources$/) }
    deb822 {
      para_file = FILENAME
      if ($0 ~ /^#/) next
      if ($0 ~ /^[ \t]*$/) { flush_paragraph(); next }
      if ($0 ~ /^[ \t]/) { if (last != "") f[last] = f[last] "\n" trim($0); next }
      i = index($0, ":"); if (i == 0) next
      last = tolower(trim(substr($0, 1, i - 1)))
      f[last] = trim(substr($0, i + 1)); nfields++
      next
    }
    {
      # One-line format: TYPE [ OPTIONS ] URI SUITE [COMPONENT...]; # starts a comment.
      line = $0; sub(/#.*/, "", line); line = trim(line)
      if (line == "") next
      type = line; sub(/[ \t].*/, "", type); rest = trim(substr(line, length(type) + 1))
      signed = ""
      if (substr(rest, 1, 1) == "[") {
        j = index(rest, "]"); if (j == 0) next
        opts = substr(rest, 2, j - 2); rest = trim(substr(rest, j + 1))
        n = split(opts, o, /[ \t]+/)
        for (k = 1; k <= n; k++) if (tolower(o[k]) ~ /^signed-by=/) signed = substr(o[k], 11)
      }
      n = split(rest, w, /[ \t]+/)
      if (n < 2 || (type != "deb" && type != "deb-src")) next
      comps = ""
      for (k = 3; k <= n; k++) comps = comps (k > 3 ? " " : "") w[k]
      emit(type, w[1], w[2], comps, signed, FILENAME)
    }
    END { if (deb822) flush_paragraph() }
  ' $files
}

codename() {
  local f
  for f in "$ROOT/etc/os-release" "$ROOT/usr/lib/os-release"; do
    if [[ -r $f ]]; then
      (
        # shellcheck disable=SC1090
        . "$f"
        echo "${VERSION_CODENAME:-}"
      )
      return 0
    fi
  done
}

# The first `deb` entry with suite $1 and component main: URI<TAB>SUITES<TAB>SIGNED-BY.
find_mirror() {
  local type uri suites comps signed file
  while IFS=$'\t' read -r type uri suites comps signed file; do
    [[ $type == deb && " $suites " == *" $1 "* && " $comps " == *" main "* && $uri != cdrom:* ]] || continue
    printf '%s\t%s\t%s\n' "$uri" "$suites" "$signed"
    return 0
  done < <(entries)
  return 1
}

what_was_read() {
  local files
  files=$(source_files | tr '\n' ' ')
  echo "read: ${files:-no apt source file under $APT (neither sources.list nor sources.list.d/*.list|*.sources)}"
}

case $CMD in
  entries) entries ;;
  mirror | deb-src)
    CODENAME=$(codename)
    if [[ -z $CODENAME ]]; then
      CODENAME=bookworm
      echo "$ME: no VERSION_CODENAME in $ROOT/etc/os-release; assuming $CODENAME" >&2
    fi
    if found=$(find_mirror "$CODENAME"); then
      IFS=$'\t' read -r uri suites signed <<<"$found"
    elif [[ $CMD == mirror ]]; then
      echo "$ME: no enabled Debian archive entry (type deb, suite $CODENAME, component main) in apt's sources under $ROOT" >&2
      echo "$ME: $(what_was_read)" >&2
      exit 1
    else
      uri=$DEFAULT_MIRROR suites=$CODENAME signed=-
      echo "$ME: no enabled Debian archive entry (type deb, suite $CODENAME, component main) in apt's sources under $ROOT; using $uri" >&2
      echo "$ME: $(what_was_read)" >&2
    fi
    if [[ $CMD == mirror ]]; then
      echo "$uri"
    else
      # The entry's own key when it names one, else Debian's archive keyring.
      [[ $signed == - || $signed == inline ]] && signed=$KEYRING
      printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
        "$uri" "$suites" "$signed"
    fi
    ;;
esac
