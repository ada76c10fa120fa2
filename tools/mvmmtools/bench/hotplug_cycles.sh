# Hot-plug cycles against a running VMM whose guest runs guest-images/scripts/hotplug (sourced by busybox sh in
# the test host, or sh here, beside the VMM; tests/hotplug_test.py and tools/boot-bench --hotplug-cycles use it).
# Cycles HP_FIRST (default 0) to HP_CYCLES - 1: add a virtio-blk disk ($HP_DIR/d0.img and d1.img in turn), wait
# for the guest's hotplug-ready marker in $MVMM_LOG, with HP_MODE=button or inflight press the attention button
# (mvmm's remove-disk; with eject the guest powers the slot off itself), wait until the VMM has let the disk go
# (ms= is that time) and the guest has seen it go (its hotplug-gone marker), and print one line per cycle:
#   HP-CYCLE i=<cycle> ms=<add to let go> retries=<adds refused while the port was being emptied>
#            bars=<PCI BAR regions in mvmm's MMIO space; -1 for QEMU> fds=<the VMM's open fds> rss_kib=<VmRSS>
#            vmm_rss_kib=<Rss beyond guest RAM (the largest mapping)> heap_kib=<[heap] Rss>
#            trims=<mvmm's by its policy; -1 for QEMU> trim_ns=<their time; -1 for QEMU>
#            malloc_kib=<what glibc malloc holds in all its arenas and mmap'ed blocks, mallinfo2's arena + hblkhd
#                        from mvmm's query-memory; -1 for QEMU>
# HP_VMM=mvmm (default): HP_SOCKET is its --api-socket; add-disk, remove-disk, and query-disks until the disk is
# gone (flushed and closed). HP_VMM=qemu: HP_SOCKET is QEMU's QMP socket; blockdev-add and device_add into
# pcie-root-port rp0, then blockdev-del until it succeeds (the device is gone and the image closed).
# Needs MVMM_CTL (tools/mvmm-ctl) and MVMM_LOG (the VMM's console output).  A cycle that takes longer than
# HP_CYCLE_LIMIT seconds (default 60) ends the run with an HP-ERROR line that says which step it waited for.
ctl() { "$MVMM_CTL" --socket "$HP_SOCKET" --wait 120 "$@"; }
qmp() { "$MVMM_CTL" --qmp --socket "$HP_SOCKET" --wait 120 "$@"; }
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
now_ms() { read -r _up _ </proc/uptime; echo $((${_up%.*} * 1000 + 10 * 1${_up#*.} - 1000)); }
# 0 while the VMM runs and the cycle has time left; else prints why and returns 1.
alive() {
	kill -0 "$pid" 2>/dev/null || { echo "HP-ERROR i=$i the VMM exited"; return 1; }
	[ "$(now_ms)" -lt "$deadline" ] ||
		{ echo "HP-ERROR i=$i no $1 within ${HP_CYCLE_LIMIT:-60} s (the cycle's limit)"; return 1; }
}
heap_kib() { awk '/\[heap\]/ { heap = 1 } heap && /^Rss:/ { print $2; exit }' "/proc/$1/smaps"; }
# The Rss of every mapping but the largest (guest RAM, which the guest's page cache fills as it likes).
vmm_rss_kib() {
	awk '/^[0-9a-f]+-[0-9a-f]+ / { m++ } /^Size:/ { size[m] = $2 } /^Rss:/ { rss[m] = $2; total += $2 }
		END { big = 1; for (i in size) if (size[i] > size[big]) big = i; print total - rss[big] }' "/proc/$1/smaps"
}
if [ "${HP_VMM:-mvmm}" = qemu ]; then
	pid=$(pidof qemu-system-x86_64)
	add() {
		qmp blockdev-add --arguments "{\"driver\": \"raw\", \"node-name\": \"n$i\", \"file\":
			{\"driver\": \"file\", \"filename\": \"$HP_DIR/d$((i % 2)).img\"}}" >/dev/null &&
			qmp device_add --arguments "{\"driver\": \"virtio-blk-pci\", \"bus\": \"rp0\", \"drive\": \"n$i\",
				\"id\": \"v$i\", \"serial\": \"hotplug$i\"}" >/dev/null ||
			{ qmp blockdev-del "node-name=n$i" >/dev/null; return 1; }
	}
	remove() { qmp device_del "id=v$i" >/dev/null; }
	# A refused add is retried: the port may still hold the last disk.
	transient() { true; }
	present() { ! qmp blockdev-del "node-name=n$i" >/dev/null; }
	counters() { echo "bars=-1 trims=-1 trim_ns=-1 malloc_kib=-1"; }
else
	# $MVMM keeps its file name in the test host: a binary named other than mvmm is found too.
	pid=${MVMM_PID:-$(pidof "$(basename "${MVMM:-mvmm}")")}
	add() { reply=$(ctl add-disk "path=$HP_DIR/d$((i % 2)).img" "serial=hotplug$i") && id=$(echo "$reply" |
		sed -n 's/.*"id":"\([^"]*\)".*/\1/p'); }
	remove() { ctl remove-disk "id=$id" >/dev/null; }
	# Only a port still being emptied is worth another try; any other refusal ends the run at once.
	transient() { case $reply in *"no free hot-pluggable root port"*) true ;; *) false ;; esac; }
	# 0: the disk is there; 1: it is gone; 2: query-disks failed ($disks says why).
	present() {
		disks=$(ctl query-disks 2>&1) || return 2
		echo "$disks" | grep -q "\"id\":\"$id\""
	}
	counters() {
		memory=$(ctl query-memory 2>&1) || { echo "query-memory failed: $memory"; return 1; }
		by_policy=$(echo "$memory" | sed 's/.*"by_policy":{\([^}]*\)}.*/\1/')
		# "malloc": null when mvmm's allocator is not glibc's.
		arena=$(echo "$memory" | field arena) hblkhd=$(echo "$memory" | field hblkhd)
		echo "bars=$(echo "$disks" | field bar_regions) trims=$(echo "$by_policy" | field trims)" \
			"trim_ns=$(echo "$by_policy" | field time_ns)" \
			"malloc_kib=$([ -n "$arena$hblkhd" ] && echo $(((arena + hblkhd) / 1024)) || echo -1)"
	}
fi
# Disks added before the guest's script looks would be found at boot, not hot-plugged.
until grep -q "MVMM-MARK hotplug-start" "$MVMM_LOG"; do sleep 0.1; done
i=${HP_FIRST:-0}
while [ "$i" -lt "$HP_CYCLES" ]; do
	start=$(now_ms)
	deadline=$((start + ${HP_CYCLE_LIMIT:-60} * 1000))
	retries=0
	until add; do
		alive "successful add-disk" || break 2
		transient || { echo "HP-ERROR i=$i the disk could not be added: $reply"; break 2; }
		retries=$((retries + 1))
		[ $retries -lt 500 ] || { echo "HP-ERROR i=$i the disk could not be added: $reply"; break 2; }
		sleep 0.02
	done
	until grep -q "hotplug-ready [0-9.]* i=$i " "$MVMM_LOG"; do
		alive "hotplug-ready marker from the guest" || break 2
		sleep 0.02
	done
	if [ "${HP_MODE:-eject}" != eject ]; then remove || echo "HP-ERROR i=$i removal refused"; fi
	while :; do
		present
		state=$?
		[ $state -eq 0 ] || break
		alive "release of the disk by the VMM" || break 2
		sleep 0.02
	done
	[ $state -ne 2 ] || { echo "HP-ERROR i=$i query-disks failed: $disks"; break; }
	end=$(now_ms)
	# The guest's side of the cycle: it saw the slot powered off.
	until grep -qE "hotplug-gone [0-9.]+ i=$i([^0-9]|$)" "$MVMM_LOG"; do
		alive "hotplug-gone marker from the guest" || break 2
		sleep 0.02
	done
	row="i=$i ms=$((end - start)) retries=$retries fds=$(ls /proc/"$pid"/fd | wc -l)"
	row="$row rss_kib=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' /proc/"$pid"/status)"
	row="$row vmm_rss_kib=$(vmm_rss_kib "$pid") heap_kib=$(heap_kib "$pid")"
	figures=$(counters) || { echo "HP-ERROR i=$i $figures"; break; }
	row="$row $figures"
	# Every figure is a number: an empty one means a reading failed.
	case " $row" in *"= "* | *=) echo "HP-ERROR i=$i a figure is missing: $row"; break ;; esac
	echo "HP-CYCLE $row"
	i=$((i + 1))
done
