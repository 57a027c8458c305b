#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12, on demand: debootstraps a
# minimal bookworm root, clones the committed HEAD of this repository into
# it and runs `bash scripts/demo.sh` then `bash scripts/test.sh` there under
# chroot with a clean environment. It catches what a machine prepared by
# hand hides (a package deps.sh forgets, an /etc/apt layout a script does not
# expect). Too slow for every CI run (debootstrap, ~1.5 GB of packages and
# every build from scratch: about 20-25 minutes on 2 cores, 15-20 with
# --skip-asan; --base saves the 1.5 minutes of debootstrap), so it is not a
# scripts/test-*.sh.
#
#   sudo bash scripts/fresh-check.sh [--skip-asan] [--keep] [--root DIR]
#        [--base TARBALL|DIR] [--save-base TARBALL] [--logs DIR] [--mirror URI]
#        [--no-cuda] [--jobs N] [--commit REV]
#
#   --skip-asan        pass RESHARD_SKIP_ASAN=1 to scripts/test.sh (faster)
#   --keep             keep the root afterwards (default: removed)
#   --root DIR         where to build the root (default: a new
#                      /var/tmp/reshard-fresh.XXXXXX); must not exist or be empty
#   --base PATH        start from this base root instead of debootstrapping:
#                      a tarball written by --save-base, or a directory
#                      (copied, so it stays untouched)
#   --save-base FILE   after debootstrap, save the bare root as FILE (.tar.gz)
#                      for later --base runs
#   --logs DIR         logs (default: /var/tmp/reshard-fresh-logs.<time>)
#   --mirror URI       the Debian mirror (default: the one apt uses here,
#                      scripts/apt-sources.sh mirror; security: the host's
#                      bookworm-security entry, else deb.debian.org)
#   --no-cuda          do not mount the host's CUDA toolkit
#   --jobs N           JOBS for the build (default: nproc)
#   --commit REV       the commit of this repository to check (default: HEAD;
#                      e.g. main from a branch's worktree)
#
# The root: debootstrap --variant=minbase bookworm plus git (a user ran `git
# clone`), apt sources as Debian 12 installs them (deb822
# /etc/apt/sources.list.d/debian.sources only, no /etc/apt/sources.list),
# /proc, /sys, /dev, /dev/pts and a fresh /dev/shm mounted, and the host's CUDA
# toolkit (/usr/local/cuda, as CI has it) mounted read-only so the CUDA
# backend builds as in CI, and the network's trust as the host has it (its
# extra CA certificates and /etc/pip.conf, when it reaches PyPI through an
# intercepting egress proxy; none on a plain network). The commands run as root with
# `env -i PATH=... HOME=/root LANG=C.UTF-8`: no rustup, no ccache, nothing
# from this machine's environment. Everything is unmounted on exit, also on
# failure or Ctrl-C. Ends with a summary (each step's duration and exit
# status); the exit status is 0 only when both commands passed.
source "$(dirname "$0")/lib/strict.sh"
cd "$(dirname "$0")/.."
REPO=$PWD
ME=fresh-check
SUITE=bookworm

REV=HEAD SKIP_ASAN=0 KEEP=0 CUDA=1 ROOTFS="" BASE="" SAVE_BASE="" LOGS="" MIRROR="" JOBS=${JOBS:-$(nproc)}
usage() {
  sed -n '/^#   sudo bash/,/^#   *e.g. main from/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
need_arg() { (($1 >= 2)) || { echo "$ME: $2 needs a value" >&2; usage; }; }
while (($#)); do
  case $1 in
    --skip-asan) SKIP_ASAN=1 ;;
    --keep) KEEP=1 ;;
    --no-cuda) CUDA=0 ;;
    --root) need_arg $# "$1"; ROOTFS=$2; shift ;;
    --base) need_arg $# "$1"; BASE=$2; shift ;;
    --save-base) need_arg $# "$1"; SAVE_BASE=$2; shift ;;
    --logs) need_arg $# "$1"; LOGS=$2; shift ;;
    --mirror) need_arg $# "$1"; MIRROR=$2; shift ;;
    --jobs) need_arg $# "$1"; JOBS=$2; shift ;;
    --commit) need_arg $# "$1"; REV=$2; shift ;;
    -h | --help) usage ;;
    *) echo "$ME: unknown option $1" >&2; usage ;;
  esac
  shift
done

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mount, chroot): sudo bash scripts/fresh-check.sh"
[[ -z $BASE || -e $BASE ]] || die "--base $BASE does not exist"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive number, got '$JOBS'"
for cmd in git chroot mount umount findmnt tar; do
  command -v "$cmd" >/dev/null || die "$cmd not found"
done
COMMIT=$(git -C "$REPO" rev-parse --verify -q "$REV^{commit}") || die "--commit $REV is not a commit of $REPO"

STAMP=$(date -u +%Y%m%d-%H%M%S)
LOGS=${LOGS:-/var/tmp/reshard-fresh-logs.$STAMP}
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
if [[ -z $ROOTFS ]]; then
  ROOTFS=$(mktemp -d /var/tmp/reshard-fresh.XXXXXX)
else
  [[ ! -e $ROOTFS || -z $(ls -A "$ROOTFS") ]] || die "--root $ROOTFS exists and is not empty"
  mkdir -p "$ROOTFS"
  ROOTFS=$(cd "$ROOTFS" && pwd)
fi
[[ $ROOTFS != / ]] || die "refusing to use / as the root"
chmod 755 "$ROOTFS"

# ------------------------------------------------------------ clean up on exit
steps=() # "name<TAB>seconds<TAB>status"
record() { steps+=("$1"$'\t'"$2"$'\t'"$3"); }
# Mounts under the root, deepest first.
mounts_under() { findmnt -rn -o TARGET | awk -v r="$ROOTFS/" 'index($0 "/", r) == 1' | sort -r; }
cleanup() {
  local rc=$? m pid left
  trap - ERR
  set +e
  # Processes still running inside the root (an MPI daemon, a stuck test)
  # hold its mounts: end them first, by id.
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$ROOTFS" ]] && kill -9 "$pid" 2>/dev/null
  done
  for m in $(mounts_under); do
    umount "$m" 2>/dev/null || umount -l "$m" || echo "$ME: could not unmount $m" >&2
  done
  left=$(mounts_under)
  if [[ -n $left ]]; then
    echo "$ME: still mounted under $ROOTFS (root NOT removed): $left" >&2
  elif ((KEEP)); then
    echo "$ME: root kept: $ROOTFS (chroot $ROOTFS /bin/bash; remove with rm -rf --one-file-system $ROOTFS)"
  else
    rm -rf --one-file-system "$ROOTFS"
  fi
  summary
  exit "$rc"
}
summary() {
  local s name secs status
  echo
  echo "== $ME summary (logs: $LOGS)"
  printf '   %-46s %9s  %s\n' step duration "exit status"
  for s in "${steps[@]}"; do
    IFS=$'\t' read -r name secs status <<<"$s"
    printf '   %-46s %6dm%02ds  %s\n' "$name" $((secs / 60)) $((secs % 60)) "$status"
  done
} >&2
trap cleanup EXIT
trap 'exit 130' INT TERM

# timed NAME LOG CMD...: runs CMD with its output in LOG (and on stdout),
# records the duration and exit status; returns the status.
timed() {
  local name=$1 log=$2 start rc
  shift 2
  echo
  echo "== $name (log: $log)"
  start=$(date +%s)
  "$@" 2>&1 | tee "$log" && rc=0 || rc=$?
  record "$name" $(($(date +%s) - start)) "$rc"
  ((rc == 0)) || { echo "$ME: $name failed with exit status $rc (log: $log)" >&2; }
  return "$rc"
}

# ------------------------------------------------------------------- the root
if [[ -z $MIRROR ]]; then
  MIRROR=$(bash scripts/apt-sources.sh mirror) ||
    die "no Debian mirror in this machine's apt sources: pass --mirror URI"
fi
SECURITY=$(bash scripts/apt-sources.sh entries | awk -F'\t' -v s=" $SUITE-security " \
  '$1 == "deb" && index(" " $3 " ", s) { print $2; exit }')
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}
echo "$ME: root $ROOTFS, mirror $MIRROR, security $SECURITY"

if [[ -n $BASE ]]; then
  if [[ -d $BASE ]]; then
    timed "base root: copy $BASE" "$LOGS/base.log" cp -a "$BASE/." "$ROOTFS/"
  else
    timed "base root: unpack ${BASE##*/}" "$LOGS/base.log" tar -xpf "$BASE" -C "$ROOTFS"
  fi
else
  if ! command -v debootstrap >/dev/null; then
    echo "$ME: installing debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  fi
  timed "debootstrap $SUITE (minbase + git)" "$LOGS/debootstrap.log" \
    debootstrap --variant=minbase --include=git "$SUITE" "$ROOTFS" "$MIRROR"
  if [[ -n $SAVE_BASE ]]; then
    timed "save base root ${SAVE_BASE##*/}" "$LOGS/save-base.log" \
      tar -czpf "$SAVE_BASE" -C "$ROOTFS" --exclude='./proc/*' --exclude='./sys/*' .
  fi
fi
[[ -x $ROOTFS/bin/bash && -f $ROOTFS/etc/debian_version ]] || die "$ROOTFS is not a Debian root (no bin/bash, etc/debian_version)"

# apt sources as Debian 12's installer writes them (deb822 only).
rm -f "$ROOTFS/etc/apt/sources.list"
mkdir -p "$ROOTFS/etc/apt/sources.list.d"
cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
# The network's trust, as every machine on it has it: where this host
# reaches HTTPS registries (PyPI) through an egress proxy whose CA it adds to
# the system's (/usr/local/share/ca-certificates) and names in pip's global
# config, the root gets the same CAs (folded into its bundle when
# ca-certificates is installed) and the same /etc/pip.conf. Nothing else of
# the host's configuration is copied.
NET_NOTE="none"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOTFS/usr/local/share/ca-certificates" "$ROOTFS/etc/ssl/certs"
  cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] &&
    cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  NET_NOTE="the host's extra CA certificates"
fi
if [[ -f /etc/pip.conf ]]; then
  cp /etc/pip.conf "$ROOTFS/etc/pip.conf"
  NET_NOTE="$NET_NOTE, /etc/pip.conf"
fi
echo "fresh-$STAMP" >"$ROOTFS/etc/hostname"
# /etc/hosts as Debian's installer writes it: the machine's name resolves
# (the chroot shares this host's name; JAX's CPU collectives look it up).
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  "$(hostname)" >"$ROOTFS/etc/hosts"
# No service starts inside a chroot (the standard policy-rc.d).
printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"

mount -t proc proc "$ROOTFS/proc"
mount -t sysfs sysfs "$ROOTFS/sys" || mount --rbind /sys "$ROOTFS/sys"
mount --bind /dev "$ROOTFS/dev"
mount --bind /dev/pts "$ROOTFS/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOTFS/dev/shm"
CUDA_NOTE="none (--no-cuda)"
if ((CUDA)); then
  if [[ -d /usr/local/cuda ]]; then
    cuda=$(readlink -f /usr/local/cuda)
    mkdir -p "$ROOTFS/usr/local/cuda"
    mount --bind "$cuda" "$ROOTFS/usr/local/cuda"
    mount -o remount,bind,ro "$ROOTFS/usr/local/cuda"
    CUDA_NOTE="$cuda (read-only at /usr/local/cuda)"
  else
    CUDA_NOTE="none (no /usr/local/cuda on this machine)"
  fi
fi
echo "$ME: CUDA toolkit: $CUDA_NOTE"
echo "$ME: network trust from the host: $NET_NOTE"

# ------------------------------------------------------------ the repository
dirty=$(git -C "$REPO" status --porcelain | wc -l)
((dirty == 0)) || echo "$ME: note: $dirty uncommitted change(s) here are NOT checked (only the commit $COMMIT)"
timed "git clone (commit ${COMMIT:0:12})" "$LOGS/clone.log" \
  bash -c 'git clone -q --no-hardlinks --no-checkout "$1" "$2" && git -C "$2" checkout -q --detach "$3"' \
  _ "$REPO" "$ROOTFS/root/reshard" "$COMMIT"

# ------------------------------------------------------- the README's commands
ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  LANG=C.UTF-8 TERM=dumb JOBS="$JOBS")
TEST_NAME="bash scripts/test.sh"
if ((SKIP_ASAN)); then
  ENV+=(RESHARD_SKIP_ASAN=1)
  TEST_NAME+=" (RESHARD_SKIP_ASAN=1)"
fi
in_root() { chroot "$ROOTFS" "${ENV[@]}" bash -c "cd /root/reshard && $1"; }
demo_rc=0 test_rc=0
timed "bash scripts/demo.sh" "$LOGS/demo.log" in_root "bash scripts/demo.sh" || demo_rc=$?
timed "$TEST_NAME" "$LOGS/test.log" in_root "bash scripts/test.sh" || test_rc=$?

echo
if ((demo_rc == 0 && test_rc == 0)); then
  echo "$ME: both commands passed on a fresh Debian $SUITE (commit ${COMMIT:0:12})"
else
  echo "$ME: FAILED on a fresh Debian $SUITE (commit ${COMMIT:0:12}): demo.sh exit $demo_rc, test.sh exit $test_rc"
  exit 1
fi
