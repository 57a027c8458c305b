# Sourced first by every bash script in scripts/ (before any `cd`):
#   source "$(dirname "$0")/lib/strict.sh"
# Strict mode plus an ERR trap. `set -e` alone ends a script without a word
# when a command fails (a grep of a missing file exits 2 and the script is
# gone), so the trap prints which command failed, its exit status and where:
#   scripts/offline-deps.sh:62: exit status 2: mirror=$(grep ... /etc/apt/sources.list)
# A failure in a child script prints one such line per level, innermost
# first, like a traceback. -E carries the trap into functions, subshells and
# command substitutions; inherit_errexit makes a command substitution stop at
# its first failing command, as the rest of the script does.
set -Eeuo pipefail
shopt -s inherit_errexit
RESHARD_STRICT_PWD=$PWD

reshard_on_err() {
  local rc=$1 cmd=$2 pipestatus=$3
  local src=${BASH_SOURCE[1]:-$0} line=${BASH_LINENO[0]:-?}
  local file=$src
  [[ $file == /* || -f $file ]] || file=$RESHARD_STRICT_PWD/$src
  local msg="$src:$line: exit status $rc"
  [[ $pipestatus == *" "* ]] && msg+=" (pipeline: $pipestatus)"
  ((BASH_SUBSHELL == 0)) || msg+=" (in a subshell)"
  [[ ${FUNCNAME[1]:-main} == main ]] || msg+=" in ${FUNCNAME[1]}()"
  printf '%s: %s\n' "$msg" "$cmd" >&2
  # The whole source line too when it says more than the failing command
  # (the other commands of a pipeline, the || alternatives).
  local text=""
  [[ $line == [0-9]* && -r $file ]] && text=$(sed -n "${line}{s/^[[:space:]]*//;p;}" "$file" 2>/dev/null || true)
  [[ -z $text || ${text//[[:space:]]/} == "${cmd//[[:space:]]/}" ]] || printf '  line %s: %s\n' "$line" "$text" >&2
  return 0
}
trap 'reshard_on_err $? "$BASH_COMMAND" "${PIPESTATUS[*]}"' ERR

# die MESSAGE...: print "<script>: MESSAGE" on stderr and exit 1.
die() {
  echo "${0##*/}: $*" >&2
  exit 1
}
