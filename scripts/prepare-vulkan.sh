#!/usr/bin/env bash
# Put a Vulkan loader (libvulkan.so.1) and an ICD file for NVIDIA's headless
# (EGL) Vulkan driver into DIR, so that wgpu finds the H200 through Vulkan on
# the device machine, which has NVIDIA's driver but no Vulkan loader.
#   here:   bash scripts/prepare-vulkan.sh .device-vk   (DIR must be git-ignored)
#   there:  source .device-vk/env.sh   (then run the wgpu binary)
# Carry DIR with the device call (carry: [".device-vk", ...]).
set -euo pipefail
dir=${1:?usage: prepare-vulkan.sh DIR}
mkdir -p "$dir"
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libvulkan1 >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get download libvulkan1 >/dev/null; })
dpkg-deb -x "$tmp"/libvulkan1_*.deb "$tmp/x"
cp -L "$tmp"/x/usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$dir/"
rm -rf "$tmp"
cat > "$dir/nvidia_egl_icd.json" <<'JSON'
{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}
JSON
cat > "$dir/env.sh" <<'SH'
# source me on the device machine
_vk_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$_vk_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VK_ICD_FILENAMES="$_vk_dir/nvidia_egl_icd.json"
export VK_DRIVER_FILES="$_vk_dir/nvidia_egl_icd.json"
SH
echo "prepared $dir (libvulkan.so.1, nvidia_egl_icd.json, env.sh)"
