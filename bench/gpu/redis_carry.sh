#!/usr/bin/env bash
# The GPU image has no redis-server; a device run can carry this machine's (Debian 12, needs
# glibc >= 2.34) with the libraries it links beyond glibc, into ./.gpuredis (git-ignored via
# .git/info/exclude). On the GPU host:
#   LD_LIBRARY_PATH=$PWD/.gpuredis/lib .gpuredis/redis-server --port 6379 --save '' --daemonize yes
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rm -rf .gpuredis && mkdir -p .gpuredis/lib
cp "$(readlink -f "$(command -v redis-server)")" .gpuredis/redis-server
ldd .gpuredis/redis-server | awk '/=> \//{print $3}' | while read -r lib; do
  case "$(basename "$lib")" in libc.so.*|libm.so.*|ld-linux*) ;; *) cp -L "$lib" .gpuredis/lib/ ;; esac
done
grep -qxF '/.gpuredis/' .git/info/exclude 2>/dev/null || printf '/.gpuredis/\n' >> .git/info/exclude
du -sh .gpuredis
