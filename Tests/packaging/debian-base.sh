#!/bin/sh
# A Debian 12 base image for the packaging tests, made here since no container registry is reachable:
# debootstrap (minbase, from the machine's Debian mirror) into a folder under .build, slimmed as Debian's
# own bookworm-slim image is (no documentation but copyright files, no man pages, locales or apt lists,
# and dpkg told to keep them out of what is installed later), then `podman import`ed as IMAGE.
# The root is kept as a tarball under .build/packaging between runs: only the first run downloads it.
#   Tests/packaging/debian-base.sh IMAGE CACHE_DIR [MIRROR]
set -eu
image=$1
cache=$2
mirror=${3:-$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)}
mirror=${mirror:-http://deb.debian.org/debian}

if podman image exists "$image"; then exit 0; fi
mkdir -p "$cache"
tarball=$cache/debian-bookworm-slim.tar
if [ ! -s "$tarball" ]; then
  root=$cache/debian-bookworm-root
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" "$mirror" > "$cache/debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  # What Debian's slim images leave out (debuerreotype's slimify), for what is there and what comes later.
  cat > "$root/etc/dpkg/dpkg.cfg.d/slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
CFG
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root/usr/share/man/"* "$root/usr/share/groff/"* "$root/usr/share/info/"* "$root/usr/share/lintian/"* \
         "$root/usr/share/locale/"* "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin "$root/var/cache/apt/archives/"*.deb \
         "$root/var/log/"*.log "$root/var/log/apt/"*
  tar -C "$root" --numeric-owner -cf "$tarball.new" .
  mv "$tarball.new" "$tarball"
  rm -rf "$root"
fi
podman import --change 'CMD ["bash"]' "$tarball" "$image" > /dev/null
