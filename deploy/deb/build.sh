#!/bin/sh
# Builds switchyard_<version>_<arch>.deb from a built binary with dpkg-deb: no network, no source
# package, no debhelper. `make deb` runs it on the binary of `make release` and then lintian
# (deploy/deb/README.md says what the package holds and why lintian's remaining tags are as they are).
#   deploy/deb/build.sh --binary .build/dist/switchyard --version 0.1.0 --out .build/deb
set -eu

binary= version= out= revision=
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --revision) revision=$2; shift 2 ;;
    *) echo "usage: $0 --binary FILE --version X.Y.Z --out DIR [--revision N]" >&2; exit 2 ;;
  esac
done
[ -n "$binary" ] && [ -n "$version" ] && [ -n "$out" ] || { echo "usage: $0 --binary FILE --version X.Y.Z --out DIR" >&2; exit 2; }
[ -x "$binary" ] || { echo "$binary: no such executable (make release builds it)" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
arch=$(dpkg --print-architecture)
full=$version${revision:+-$revision}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The tree as dpkg-shlibdeps expects it: debian/control beside debian/<package>, the package's root.
tree=$out/tree
root=$tree/debian/switchyard
rm -rf "$tree" "$out/root" "$out/shlibs"
# Every file's time is the commit's (or 0 outside git): the same tree gives the same package.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
umask 022

install -D -m 0755 "$binary" "$root/usr/bin/switchyard"
mkdir -p "$root/lib/systemd/system"
sed 's|/usr/local/bin/switchyard|/usr/bin/switchyard|g' "$repo/deploy/switchyard.service" > "$root/lib/systemd/system/switchyard.service"
install -D -m 0644 "$repo/deploy/switchyard.sysusers" "$root/usr/lib/sysusers.d/switchyard.conf"
# The conffile. dpkg installs it 0644 root; postinst gives it to the group switchyard, mode 0640.
install -D -m 0644 "$repo/config.example.yaml" "$root/etc/switchyard/config.yaml"
install -D -m 0644 "$repo/config.example.yaml" "$root/usr/share/doc/switchyard/examples/config.example.yaml"
for f in mosquitto.conf switchyard.acl; do install -m 0644 "$repo/deploy/$f" "$root/usr/share/doc/switchyard/examples/$f"; done
install -m 0644 "$here/copyright" "$root/usr/share/doc/switchyard/copyright"
install -D -m 0644 "$here/switchyard.1" "$root/usr/share/man/man1/switchyard.1"
gzip -9n "$root/usr/share/man/man1/switchyard.1"
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
# A version without a Debian revision is a native package's, whose changelog is changelog.gz.
changelog=changelog.Debian.gz
[ -n "$revision" ] || changelog=changelog.gz
commit=$("$binary" --version 2>/dev/null | sed -n 's/.*(commit \(.*\))$/\1/p')
printf 'switchyard (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- %s  %s\n' \
  "$full" "${commit:-unknown}" "Switchyard maintainers <maintainers@switchyard.invalid>" "$date" \
  | gzip -9n > "$root/usr/share/doc/switchyard/$changelog"
chmod 0644 "$root/usr/share/doc/switchyard/$changelog"

# Depends: what the binary links, as dpkg-shlibdeps reads it from the installed libraries' shlibs. libcurl
# is loaded when an HTTP adapter is configured (dlopen, Sources/CCurl): Recommends, with the CA certificates.
mkdir -p "$root/DEBIAN"
printf 'Source: switchyard\n\nPackage: switchyard\nArchitecture: any\n' > "$tree/debian/control"
depends=$(cd "$tree" && dpkg-shlibdeps -O -e debian/switchyard/usr/bin/switchyard | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "dpkg-shlibdeps found no dependencies" >&2; exit 1; }

mkdir -p "$root/DEBIAN"
for s in postinst prerm postrm; do install -m 0755 "$here/$s" "$root/DEBIAN/$s"; done
echo /etc/switchyard/config.yaml > "$root/DEBIAN/conffiles"
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: switchyard
Version: $full
Architecture: $arch
Maintainer: Switchyard maintainers <maintainers@switchyard.invalid>
Installed-Size: $size
Depends: $depends, systemd | systemd-standalone-sysusers | systemd-sysusers, init-system-helpers (>= 1.52)
Recommends: libcurl4, ca-certificates, mosquitto-clients
Suggests: mosquitto
Section: net
Priority: optional
Homepage: https://github.com/switchyard/switchyard
Description: MQTT bridge for LIFX, Nova, Electric Imp, Home Assistant and Livecoding
 Switchyard is a daemon that bridges home-automation devices and services onto
 any MQTT broker: LIFX lights over the cloud and the LAN, Nova Bluetooth LE
 flashes, Electric Imp agents, a Home Assistant WebSocket mirror, Livecoding.tv
 channels and virtual devices. Every device gets retained state topics, /set
 commands with results, and Home Assistant MQTT discovery.
 .
 The package runs it as the systemd service switchyard.service, as the system
 user switchyard, with its config in /etc/switchyard/config.yaml. An operator
 console, Prometheus metrics and health probes are served on 127.0.0.1:9180.
CONTROL
touch -h -d "@$SOURCE_DATE_EPOCH" "$root/DEBIAN" "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

deb=$out/switchyard_${full}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb: $(stat -c %s "$deb") bytes; Depends: $depends"
