#!/usr/bin/env bash
# Run a command on a real cgroup v2 kernel: Debian 12's own kernel (linux-image-amd64,
# downloaded with apt-get and unpacked with dpkg-deb into build/vm/, nothing installed into
# /boot) booted by qemu-system-x86_64 under TCG, with this machine's / shared read-write
# over virtio-9p as the guest's root and a pure cgroup v2 hierarchy at /sys/fs/cgroup.
#
#   tests/vm/run.sh [-m MiB] [-t SECONDS] -- COMMAND [ARGS...]
#
# COMMAND runs as root in the guest, chrooted into the shared /, in the current directory,
# with PATH, HOME, LANG and every MEMTRIM_* variable of the caller. Its output (and the
# guest kernel's messages) is printed as it comes; the serial console is also kept in
# RUNDIR/console.log. Exit code: COMMAND's, or 124 when the VM ran over its time (default
# MEMTRIM_VM_TIMEOUT or 3600 s, a hang guard; qemu is killed then), or 125 when the VM did not run it.
#   MEMTRIM_VM_DIR   cache and run directories (default build/vm of the repository)
#   MEMTRIM_VM_KEEP  set: keep RUNDIR after the run
# KVM is not used. The development machine is itself a guest whose /dev/kvm is kvm_pvm
# (/sys/module/kvm_pvm: PVM, nested guests without hardware virtualization), which runs
# only kernels built as PVM guests: with -accel kvm qemu 7.2 aborts at once ("failed to set
# MSR 0x10a", IA32_ARCH_CAPABILITIES, with -cpu host or max), and with that feature off
# (-cpu host,-arch-capabilities) the guest stays in SeaBIOS's real mode (EIP 0xea667 after
# 20 s, no kernel line in 60 s; -cpu EPYC and qemu64 the same). TCG boots Debian's kernel
# (about 12 s to the command). Single-threaded script; each run has its own RUNDIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mem=3072
timeout_s=${MEMTRIM_VM_TIMEOUT:-3600}
while [ $# -gt 0 ]; do
  case $1 in
    -m) mem=$2; shift 2 ;;
    -t) timeout_s=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "vm: unknown option $1 (usage: $0 [-m MiB] [-t SECONDS] -- COMMAND...)" >&2; exit 125 ;;
  esac
done
[ $# -gt 0 ] || { echo "vm: no command (usage: $0 [-m MiB] [-t SECONDS] -- COMMAND...)" >&2; exit 125; }
vmdir=${MEMTRIM_VM_DIR:-$repo/build/vm}
mkdir -p "$vmdir"
vmdir=$(cd "$vmdir" && pwd)

for tool in qemu-system-x86_64 busybox apt-get dpkg-deb timeout; do
  command -v "$tool" >/dev/null || {
    echo "vm: $tool is missing (tests/install-deps.sh all installs qemu-system-x86 and busybox-static)" >&2
    exit 125
  }
done
bb=$(command -v busybox)
file -L "$bb" 2>/dev/null | grep -q 'statically linked' || ldd "$bb" 2>&1 | grep -q 'not a dynamic' || {
  echo "vm: $bb is not statically linked (install busybox-static)" >&2
  exit 125
}

# The kernel: the package linux-image-amd64 depends on (linux-image-6.1.0-N-amd64), once.
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1
}
pkg=$(kernel_pkg)
if [ -z "$pkg" ]; then
  apt-get update -qq >&2 || true
  pkg=$(kernel_pkg)
fi
[ -n "$pkg" ] || { echo "vm: apt-cache does not know linux-image-amd64's kernel package" >&2; exit 125; }
kdir=$vmdir/$pkg
if [ ! -f "$kdir/.unpacked" ]; then
  echo "vm: fetching $pkg" >&2
  rm -rf "$kdir" "$vmdir/dl"
  mkdir -p "$vmdir/dl"
  # _apt cannot write into a root-only build tree: that warning is harmless, the file lands.
  (cd "$vmdir/dl" && apt-get download "$pkg" 2>&1 | grep -v 'unsandboxed' >&2) || true
  deb=$(ls "$vmdir/dl/$pkg"_*.deb 2>/dev/null | head -n 1)
  if [ -z "$deb" ]; then
    apt-get update -qq >&2 || true
    (cd "$vmdir/dl" && apt-get download "$pkg" 2>&1 | grep -v 'unsandboxed' >&2) || true
    deb=$(ls "$vmdir/dl/$pkg"_*.deb 2>/dev/null | head -n 1)
  fi
  [ -n "$deb" ] || { echo "vm: apt-get download $pkg failed" >&2; exit 125; }
  mkdir -p "$kdir"
  dpkg-deb -x "$deb" "$kdir"
  rm -rf "$vmdir/dl"
  touch "$kdir/.unpacked"
fi
kver=${pkg#linux-image-}
vmlinuz=$kdir/boot/vmlinuz-$kver
moddir=$kdir/lib/modules/$kver
[ -f "$vmlinuz" ] && [ -d "$moddir" ] || { echo "vm: $kdir holds no kernel $kver" >&2; exit 125; }

# The initramfs: busybox, tests/vm/init, and the modules the 9p root needs with their
# dependencies (modules.dep made by busybox depmod; the package ships none, depmod runs
# in its postinst). Rebuilt when init or busybox is newer than it.
initrd=$vmdir/initramfs-$kver.cpio.gz
if [ ! -f "$initrd" ] || [ "$here/init" -nt "$initrd" ] || [ "$bb" -nt "$initrd" ]; then
  stage=$(mktemp -d "$vmdir/initramfs.XXXXXX")
  [ -f "$moddir/modules.dep" ] || "$bb" depmod -b "$kdir" "$kver"
  mkdir -p "$stage/bin" "$stage/lib/modules/$kver"
  cp "$bb" "$stage/bin/busybox"
  cp "$here/init" "$stage/init"
  chmod 755 "$stage/init"
  wanted="virtio_pci 9pnet_virtio 9p"
  printf '%s\n' $wanted >"$stage/modules.list"
  # Each wanted module's line of modules.dep lists its dependencies: copy them all.
  for m in $wanted; do
    line=$(grep -E "(^|/)$m\.ko(\.[a-z]+)?:" "$moddir/modules.dep") ||
      { echo "vm: $kver has no module $m" >&2; rm -rf "$stage"; exit 125; }
    for f in ${line%%:*} ${line#*:}; do
      mkdir -p "$stage/lib/modules/$kver/$(dirname "$f")"
      cp "$moddir/$f" "$stage/lib/modules/$kver/$f"
    done
  done
  cp "$moddir/modules.dep" "$moddir/modules.order" "$moddir/modules.builtin" "$stage/lib/modules/$kver/"
  (cd "$stage" && find . | "$bb" cpio -o -H newc 2>/dev/null | gzip -1) >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$stage"
fi

# One run: its own directory in the shared tree, the command as a script.
rundir=$(mktemp -d "$vmdir/run.XXXXXX")
cleanup() {
  [ -n "${tailpid:-}" ] && kill "$tailpid" 2>/dev/null
  [ -n "${MEMTRIM_VM_KEEP:-}" ] || rm -rf "$rundir"
}
trap cleanup EXIT
{
  echo "# written by tests/vm/run.sh"
  # TERM=dumb: the console is a tty, but its reader is a log, not a terminal.
  printf 'export PATH=%q HOME=%q LANG=%q TERM=dumb\n' "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "${HOME:-/root}" "${LANG:-C.UTF-8}"
  while IFS= read -r name; do
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e | grep '^MEMTRIM_' || true)
  printf 'cd %q || exit 125\n' "$PWD"
  printf '%q ' "$@"
  echo
} >"$rundir/cmd.sh"
log=$rundir/console.log
# A boot that never reaches our init (TCG on a loaded host can fail the kernel's
# early timer check: "IO-APIC + timer doesn't work") is booted again, at most
# three times; the command itself runs once, only after init is up.
for attempt in 1 2 3; do
  : >"$log"
  tail -n +1 -f "$log" &
  tailpid=$!

  set +e
  timeout -k 15 "$timeout_s" qemu-system-x86_64 \
    -accel tcg,thread=multi -machine q35 -cpu max -smp 2 -m "$mem" \
    -kernel "$vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 loglevel=4 no_timer_check memtrim.run=$rundir" \
    -nographic -monitor none -serial "file:$log" -no-reboot \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=passthrough,id=root" \
    -nic none </dev/null >"$rundir/qemu.log" 2>&1
  qrc=$?
  set -e
  sleep 0.3 # let tail print the console's last lines
  kill "$tailpid" 2>/dev/null || true
  wait "$tailpid" 2>/dev/null || true
  tailpid=
  { [ -f "$rundir/rc" ] || grep -q 'vm-init: up' "$log"; } && break
  [ "$qrc" = 124 ] || [ "$qrc" = 137 ] && break
  echo "vm: boot $attempt did not reach init (qemu $qrc); booting again" >&2
done
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "vm: the VM ran over ${timeout_s} s and was killed" >&2
  exit 124
fi
if [ ! -f "$rundir/rc" ]; then
  echo "vm: the VM ended (qemu $qrc) without running the command to its end; qemu said:" >&2
  cat "$rundir/qemu.log" >&2
  exit 125
fi
exit "$(cat "$rundir/rc")"
