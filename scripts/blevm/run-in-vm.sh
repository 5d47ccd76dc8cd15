#!/bin/bash
# blevm: runs a script against a real Linux Bluetooth stack without Bluetooth hardware (README.md here).
# Boots a throw-away QEMU VM with Debian's stock kernel (bluetooth and hci_vhci as modules), mounts this
# machine's root read-only over 9p and runs the guest script in a chroot of it, so binaries built here
# run unchanged against the kernel's HCI/L2CAP/ATT stack, with BlueZ's btvirt virtual LE controllers.
# Usage (as root): scripts/blevm/run-in-vm.sh /abs/path/guest.sh [/abs/path/rw-dir]
# Exits with the guest script's status; 124 when the VM ran past VM_TIMEOUT (300 s) or never reported.
set -euo pipefail
GUEST_SCRIPT=${1:?usage: run-in-vm.sh /abs/path/guest.sh [/abs/path/rw-dir]}
SHARE=${2:-$(dirname "$GUEST_SCRIPT")}
case $GUEST_SCRIPT in /*) ;; *) echo "blevm: the guest script path must be absolute" >&2; exit 2;; esac
WORK=${WORK:-/tmp/switchyard-blevm}
mkdir -p "$WORK"; cd "$WORK"
export DEBIAN_FRONTEND=noninteractive

# The host side: QEMU, busybox for the initramfs, BlueZ's btvirt (used inside the VM from the host root).
command -v qemu-system-x86_64 >/dev/null || apt-get install -y -q --no-install-recommends qemu-system-x86 busybox-static
command -v btvirt >/dev/null || apt-get install -y -q bluez bluez-test-tools libbluetooth-dev

# Debian's current kernel package, unpacked once (not installed).
KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
KVER=${KPKG#linux-image-}
if [ ! -d kimg/boot ]; then apt-get download "$KPKG"; dpkg -x "${KPKG}"_*.deb kimg; fi
KM=kimg/lib/modules/$KVER/kernel

# A minimal initramfs: busybox, the modules Bluetooth and 9p need (in load order), and an init that
# mounts the host root and runs the guest script.
R=$WORK/root; rm -rf "$R"; mkdir -p "$R"/{bin,mods,proc,sys,dev,host}
cp /bin/busybox "$R/bin/busybox"
MODS="lib/crc16 crypto/ecc net/rfkill/rfkill crypto/ecdh_generic net/bluetooth/bluetooth drivers/bluetooth/hci_vhci
      crypto/af_alg crypto/algif_skcipher crypto/algif_hash crypto/cmac crypto/ecb
      drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci_legacy_dev
      drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p"
ORDER=""
for f in $MODS; do
  src=$(ls "$KM/$f".ko* 2>/dev/null | head -1) || true
  [ -n "$src" ] || { echo "blevm: module $f not found (built in?)"; continue; }
  n=$(basename "$f"); ORDER="$ORDER $n"
  case $src in *.xz) xz -dc "$src" > "$R/mods/$n.ko";; *.zst) zstd -dc "$src" > "$R/mods/$n.ko";; *) cp "$src" "$R/mods/$n.ko";; esac
done
cat > "$R/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $ORDER; do insmod /mods/\$m.ko 2>/dev/null || echo "insmod \$m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro hostroot /host
mount -t proc proc /host/proc; mount -t sysfs sys /host/sys; mount -t devtmpfs dev /host/dev
mount -t 9p -o trans=virtio,version=9p2000.L hosttmp /host/tmp || mount -t tmpfs tmpfs /host/tmp
mount -t tmpfs tmpfs /host/run; mount -t tmpfs tmpfs /host/var/lib/bluetooth 2>/dev/null
mkdir -p /host$SHARE; mount -t 9p -o trans=virtio,version=9p2000.L share /host$SHARE
echo "== guest kernel \$(uname -r); \$(ls -l /dev/vhci)"
chroot /host /bin/bash $GUEST_SCRIPT; echo "== guest script exit \$?"
sync; poweroff -f
INIT
chmod +x "$R/init"
(cd "$R" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$WORK/initrd.gz")

# KVM when this machine offers it (seconds instead of a minute), software emulation otherwise; a KVM
# that cannot run this guest (nested virtualisation often cannot: the guest then never gets past its
# firmware, and QEMU does not exit) falls back to emulation once the guest has not booted in KVM_BOOT s.
LOG="$WORK/console.log"
# $1: the accelerator's options; $2: seconds the guest has to boot (0: VM_TIMEOUT alone bounds it).
boot() {
  echo "blevm: kernel $KVER, ${1%% -cpu*}"
  : > "$LOG"
  rm -f "$WORK/qemu.pid"
  # shellcheck disable=SC2086
  ( timeout "${VM_TIMEOUT:-300}" qemu-system-x86_64 $1 -m 1024 -smp 2 -pidfile "$WORK/qemu.pid" \
    -nographic -no-reboot -kernel "kimg/boot/vmlinuz-$KVER" -initrd "$WORK/initrd.gz" \
    -append "console=ttyS0 loglevel=3 panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$SHARE",mount_tag=share,security_model=none,multidevs=remap \
    -virtfs local,path=/tmp,mount_tag=hosttmp,security_model=none,multidevs=remap \
    2>&1 | tee "$LOG" || true ) &
  local vm=$! waited=0
  if [ "$2" -gt 0 ]; then
    while [ "$waited" -lt "$2" ] && kill -0 "$vm" 2>/dev/null && ! grep -q "== guest kernel" "$LOG"; do
      sleep 1; waited=$((waited + 1))
    done
    if ! grep -q "== guest kernel" "$LOG" && [ -s "$WORK/qemu.pid" ]; then kill "$(cat "$WORK/qemu.pid")" 2>/dev/null || true; fi
  fi
  wait "$vm" || true
}
TCG="-accel tcg,thread=multi -cpu max"
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  boot "-accel kvm -cpu host" "${KVM_BOOT:-60}"
  grep -q "== guest kernel" "$LOG" || { echo "blevm: KVM could not boot the guest in ${KVM_BOOT:-60} s; emulating instead"; boot "$TCG" 0; }
else
  boot "$TCG" 0
fi
rc=$(sed -n 's/.*== guest script exit \([0-9]*\).*/\1/p' "$LOG" | tail -n 1)
exit "${rc:-124}"
