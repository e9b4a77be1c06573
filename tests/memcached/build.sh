#!/usr/bin/env bash
# Build memcached <version> from Debian's source package, for the version matrix of the tests.
#
#   tests/memcached/build.sh 1.6.45 [build-dir]    ->  <build-dir>/memcached/1.6.45/memcached
#
# Debian 12 ships 1.6.18 (the apt package); Debian 13 (trixie) has 1.6.38 and unstable 1.6.45.
# Their source packages build on Debian 12 (the binary .debs do not run there: newer glibc, lua).
# apt fetches them through the archive this machine's apt sources already use (no host name is
# written here), with a private sources list and list directory, so the system's apt state is
# untouched. A built binary is cached: a second run does nothing.
set -euo pipefail

version=${1:?usage: build.sh VERSION [BUILD_DIR]}
build=$(realpath -m "${2:-build}")
out="$build/memcached/$version"
[ -x "$out/memcached" ] && exit 0

SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
need=""
for p in libevent-dev xz-utils gcc make; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
if [ -n "$need" ]; then
  echo "apt: installing$need" >&2
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi

# The Debian archive URI from the machine's apt configuration (deb822 .sources or one-line lists),
# skipping the security archive.
archive_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    awk 'BEGIN{RS=""; FS="\n"}
         { uri=""; sec=0
           for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) { split($i,a,/[ \t]+/); uri=a[2] }
                                 if ($i ~ /^Suites:.*-security/) sec=1 }
           if (uri != "" && !sec && uri ~ /debian\/?$/) { print uri; exit } }' "$f"
  done
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1=="deb" && $0 !~ /security/ { for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' || true
}
uri=$(archive_uri | head -1)
[ -n "$uri" ] || { echo "build.sh: no Debian archive in /etc/apt sources" >&2; exit 1; }

work="$build/memcached/src"
apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial" "$work/dl"
printf 'deb-src [trusted=yes] %s %s main\n' "$uri" trixie "$uri" unstable > "$apt_dir/sources.list"
APT=(apt-get -q -o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
     -o Dir::State::Lists="$apt_dir/lists" -o APT::Sandbox::User=root)
tarball="$work/dl/memcached_${version}.orig.tar.xz"
if [ ! -f "$tarball" ]; then
  "${APT[@]}" update >/dev/null
  # apt may report the .dsc as missing (404) although the .orig.tar.xz arrives: judge by the file.
  (cd "$work/dl" && "${APT[@]}" source --download-only "memcached=${version}-1" >/dev/null 2>&1 || true)
  [ -f "$tarball" ] || { echo "build.sh: could not download memcached ${version} sources" >&2; exit 1; }
fi

src="$work/memcached-$version"
rm -rf "$src" && mkdir -p "$src"
tar -xJf "$tarball" -C "$src" --strip-components=1
(cd "$src" && ./configure --enable-proxy=no >/dev/null && make -j"$(nproc)" memcached >/dev/null)
mkdir -p "$out"
cp "$src/memcached" "$out/memcached.tmp" && mv "$out/memcached.tmp" "$out/memcached"
rm -rf "$src"
"$out/memcached" -V
