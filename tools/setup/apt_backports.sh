#!/usr/bin/env bash
# Adds Debian's backports suite of this release (bookworm-backports on
# bookworm) to apt's sources, from the same mirror the machine already uses
# for the release itself (the caller runs `apt-get update`). kvcast needs it for
# ngtcp2 1.x (bookworm's own archive has 0.12); `kvcast.sh` and the image
# build call it. Does nothing when the suite is already configured.
#
#   tools/setup/apt_backports.sh        (as root, or with sudo available)
set -euo pipefail
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ -z "$codename" ]; then
  echo "apt_backports.sh: /etc/os-release names no release codename" >&2
  exit 1
fi
suite="$codename-backports"
sources=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
existing=()
for f in "${sources[@]}"; do [ -f "$f" ] && existing+=("$f"); done
if [ ${#existing[@]} -gt 0 ] && grep -qsE "^[^#]*[[:space:]]$suite([[:space:]]|$)" "${existing[@]}"; then
  exit 0
fi

# The mirror serving "$codename" main: a one-line entry ("deb [opts] URI
# SUITE COMPONENTS") or a deb822 stanza ("URIs:", "Suites:").
uri=""
for f in "${existing[@]}"; do
  if [[ $f == *.sources ]]; then
    uri=$(awk -v want="$codename" '
      /^[[:space:]]*$/ { if (ok && u != "") { print u; exit } u = ""; ok = 0; next }
      /^URIs:/ { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == want) ok = 1 }
      END { if (ok && u != "") print u }' "$f" | head -1)
  else
    uri=$(awk -v want="$codename" '
      $1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                    if ($(i + 1) == want) { print $i; exit } }' "$f")
  fi
  [ -n "$uri" ] && break
done
if [ -z "$uri" ]; then
  echo "apt_backports.sh: no apt source for '$codename' to take the mirror from" >&2
  exit 1
fi

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$uri" "$suite" | $sudo tee "/etc/apt/sources.list.d/$suite.sources" >/dev/null
echo "apt_backports.sh: added $suite from $uri" >&2
