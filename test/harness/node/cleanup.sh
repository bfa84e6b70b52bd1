#!/usr/bin/env bash
# Undoes one real node (node.ts) from its folder alone, so that it works the
# same from stop(), from the runner's exit hook and from the watchdog after
# the runner was killed outright:
#
#   1. kills the node's processes (process groups in $dir/pids), every process
#      left in the node's cgroups (containers) and the runc shims of its
#      containerd (they leave containerd's process group on purpose);
#   2. runs the lines of $dir/undo in reverse order: node.ts appends one
#      before each change it makes to the machine (sysctls, veth, netns,
#      cgroups, paths that did not exist before);
#   3. unmounts everything under $dir, deepest first;
#   4. deletes $dir, unless $2 is "keep".
#
# With $2 "kill" it does step 1 only: a node lost at once, for the tests.
#
# Every step goes on when one fails: a half-started node is undone as far as it got.
set -uo pipefail

dir="$1"
keep="${2:-}"
[[ -d "$dir" ]] || exit 0

kill_cgroup_tree() {
  local root="$1" procs
  [[ -d "$root" ]] || return 0
  for procs in $(find "$root" -name cgroup.procs 2>/dev/null); do
    while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$procs"
  done
}

# Removes cgroup folders below and including $1, children first; a cgroup
# that still has a process stays (rmdir fails) rather than being forced.
remove_cgroup_tree() {
  local root="$1" i
  [[ -d "$root" ]] || return 0
  # Killed processes leave their cgroups a moment after the signal.
  for i in 1 2 3 4 5 6 7 8 9 10; do
    find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null
    [[ -d "$root" ]] || return 0
    kill_cgroup_tree "$root"
    sleep 0.2
  done
}

# Deletes what was created below $1 since $2 (a listing taken before the node
# started, one name a line; the word "absent" means $1 did not exist).
remove_new_entries() {
  local path="$1" before="$2" entry m
  [[ -e "$path" || -L "$path" ]] || return 0
  # Mounts below the path go first (containerd's network namespaces, the kubelet's volumes).
  for m in $(awk -v p="$path/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  if [[ "$before" == absent ]]; then
    umount "$path" 2>/dev/null
    rm -rf "$path"
    return 0
  fi
  while IFS= read -r entry; do
    [[ -n "$entry" ]] || continue
    grep -qxF -- "$entry" "$before" 2>/dev/null || rm -rf "${path:?}/$entry"
  done < <(ls -A "$path")
}

if [[ -f "$dir/pids" ]]; then
  while read -r g; do kill -KILL -- "-$g" 2>/dev/null; done <"$dir/pids"
fi
if [[ -f "$dir/cgroup-root" ]]; then
  cgroup_root="$(cat "$dir/cgroup-root")"
  for hierarchy in /sys/fs/cgroup/*/; do kill_cgroup_tree "$hierarchy${cgroup_root#/}"; done
fi
# The shims were started by this node's containerd: their command line names
# its socket, which lives in $dir and so is this node's alone.
address="$dir/containerd/containerd.sock"
for proc in /proc/[0-9]*; do
  if [[ -r "$proc/cmdline" ]] && tr '\0' '\n' <"$proc/cmdline" 2>/dev/null | grep -qxF -- "$address"; then
    kill -KILL "${proc#/proc/}" 2>/dev/null
  fi
done
sleep 0.5
# "kill" stops here: the node is dead, as after a power cut, and its folder,
# mounts and files stay for the test to read (stop() undoes them later).
[[ "$keep" == kill ]] && exit 0

if [[ -f "$dir/undo" ]]; then
  tac "$dir/undo" | while IFS= read -r line; do
    [[ -n "$line" ]] || continue
    eval "$line" 2>/dev/null
  done
  mv "$dir/undo" "$dir/undo.done"
fi

for m in $(awk -v p="$dir/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done

# Last, since every umount above may have created it again.
if [[ -f "$dir/run-mount-absent" ]]; then
  rmdir /run/mount 2>/dev/null
fi

if [[ "$keep" != keep ]]; then
  rm -rf "$dir"
fi
exit 0
