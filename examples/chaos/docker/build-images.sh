#!/usr/bin/env bash
# Builds the local images of the Docker examples without pulling anything (the engine here cannot pull):
#   repro-chaos/busybox:1   FROM scratch + Debian's busybox-static (sh, sleep, nc, ...)
#   repro-chaos/redis:7     FROM scratch + Debian's redis-server and the shared libraries it needs (ldd), + busybox
# Both are made with `docker import` of a root directory assembled here, and carry the label
# repro.chaos.example=1 (remove them with: docker image rm $(docker images -q -f label=repro.chaos.example=1)).
# Usage: build-images.sh [busybox|redis]...   (default: both). Needs busybox-static and redis-server.
# BUSYBOX_IMAGE, REDIS_IMAGE override the tags; EXTRA_LABEL=k=v adds a label (tests remove their images by it).
set -euo pipefail
busybox_image=${BUSYBOX_IMAGE:-repro-chaos/busybox:1}
redis_image=${REDIS_IMAGE:-repro-chaos/redis:7}
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(busybox redis)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

busybox_root() {
    local root=$1
    mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/data"
    cp /bin/busybox "$root/bin/busybox"
    for a in sh sleep echo cat ls nc true false kill ps date seq; do ln -sf busybox "$root/bin/$a"; done
    echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
    echo "repro-chaos image (FROM scratch, Debian busybox-static)" > "$root/etc/repro-chaos-image"
}

import() {
    local root=$1 tag=$2 cmd=$3
    local label=()
    [ -z "${EXTRA_LABEL:-}" ] || label=(--change "LABEL $EXTRA_LABEL")
    tar -C "$root" -c . | docker import --change "CMD $cmd" --change 'LABEL repro.chaos.example=1' "${label[@]}" - "$tag" >/dev/null
    echo "$tag $(docker image inspect -f '{{.Id}}' "$tag")"
}

for w in "${want[@]}"; do
    case "$w" in
    busybox)
        busybox_root "$work/busybox"
        import "$work/busybox" "$busybox_image" '["/bin/sh"]'
        ;;
    redis)
        r="$work/redis"
        busybox_root "$r"
        bin=$(readlink -f /usr/bin/redis-server)
        mkdir -p "$r/usr/bin"
        cp "$bin" "$r/usr/bin/redis-server"
        # The dynamic loader and every library ldd lists, at the same paths.
        for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
            mkdir -p "$r$(dirname "$lib")"
            cp -L "$lib" "$r$lib"
        done
        import "$r" "$redis_image" '["/usr/bin/redis-server", "--bind", "0.0.0.0", "--protected-mode", "no"]'
        ;;
    *) echo "unknown image $w (busybox or redis)" >&2; exit 2 ;;
    esac
done
