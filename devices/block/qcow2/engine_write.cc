// The write side of Engine: writes in place or into new clusters, discard, write-zeroes.
#include <algorithm>

#include "devices/block/qcow2/engine.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using Written = Result<uint64_t, std::error_code>;

}  // namespace

bool Engine::in_flight(uint64_t begin, uint64_t end) const {
    return std::ranges::any_of(in_flight_,
                               [&](const InFlight& f) { return begin < f.end && f.begin < end; });
}

uint64_t Engine::enter_flight(const Extent& run) {
    const uint64_t begin = run.cluster_start(geometry_);
    in_flight_.push_back(
        {++flights_, begin, begin + (run.clusters(geometry_) << geometry_.cluster_bits)});
    return flights_;
}

void Engine::leave_flight(uint64_t id) {
    std::erase_if(in_flight_, [&](const InFlight& f) { return f.id == id; });
    allocation_done_.notify_all();
}

IoResult Engine::write(uint64_t offset, const GuestBuffers& from) {
    if (read_only_) return io_error(std::errc::read_only_file_system);
    if (auto in_range = check_range(offset, from.size()); !in_range) return in_range;
    for (uint64_t done = 0; done < from.size();) {
        auto written = write_run(offset + done, from.slice(done, from.size() - done));
        if (!written) return Unexpected{written.error()};
        done += *written;
    }
    return Ok{};
}

// Writes the start of `from` at guest `offset`: one run of clusters; returns how many bytes.
Written Engine::write_run(uint64_t offset, const GuestBuffers& from) {
    Lock lock(mutex_);
    for (;;) {
        auto run = map_.lookup(offset, from.size());
        if (!run) return Unexpected{run.error()};
        if (run->in_place()) {
            // In flight too: a discard must not free the clusters under the write.
            const uint64_t flight = enter_flight(*run);
            lock.unlock();
            const IoResult written =
                file_->write(run->host_offset(geometry_, offset), {from.slice(0, run->length)});
            lock.lock();
            leave_flight(flight);
            if (!written) return Unexpected{written.error()};
            return run->length;
        }
        const uint64_t begin = run->cluster_start(geometry_);
        if (in_flight(begin, begin + (run->clusters(geometry_) << geometry_.cluster_bits))) {
            allocation_done_.wait(lock);  // then look again: it may be ours to write in place
            continue;
        }
        if (auto prepared = map_.prepare_l2(offset); !prepared) return Unexpected{prepared.error()};
        return allocate_run(lock, *run, from);
    }
}

// New clusters for the run (or as much of it as contiguous free clusters take): the guest's
// bytes, and around them what those clusters read as now (backing file, zeroes, a compressed
// or shared cluster): copy-on-write.
Written Engine::allocate_run(Lock& lock, Extent run, const GuestBuffers& from) {
    const uint64_t cs = geometry_.cluster_size();
    const uint64_t begin = run.cluster_start(geometry_);
    auto allocated = refcounts_.allocate(run.clusters(geometry_));
    if (!allocated) return Unexpected{allocated.error()};
    const uint64_t host = allocated->offset, count = allocated->count;
    run.length = std::min(run.length, count * cs - (run.guest_offset - begin));
    const uint64_t flight = enter_flight(run);
    lock.unlock();

    const uint64_t data_end = run.guest_offset + run.length;
    IoResult done = Ok{};
    {
        const ScratchPool::Lease scratch = scratch_.acquire();  // not under the lock
        const HostBuffer head(scratch.head().first(run.guest_offset - begin));
        const HostBuffer tail(scratch.tail().first(begin + count * cs - data_end));
        done = read_extent(run, begin, head.buffers(), &scratch);
        if (done) done = read_extent(run, data_end, tail.buffers(), &scratch);
        if (done)
            done = file_->write(host, {head.buffers(), from.slice(0, run.length), tail.buffers()});
    }
    lock.lock();
    if (done) done = link(run, host);
    if (!done) (void)refcounts_.unallocate(host, count);  // nothing points at them
    leave_flight(flight);
    if (!done) return Unexpected{done.error()};
    return run.length;
}

// Points the run's L2 entries at the new clusters, after their refcounts reach the file.
IoResult Engine::link(const Extent& run, uint64_t host) {
    if (auto ordered = l2_cache_.set_dependency(refcount_cache_); !ordered) return ordered;
    return replace_entries(run, data_entry(host), geometry_.cluster_size(), true);
}

// Sets the run's entries to `entry`, `entry + step`... and, with `release_old`, drops the
// references the old entries held, in QEMU's order: the entries change, then the refcount
// cache starts waiting for the L2 cache, then the refcounts drop.  In the other order a
// refcount block written to make room in its cache while the references drop spends the
// dependency before the entries change, and the drop can reach the file before them (issue
// 25).  The refcounts are checked first, so a corrupt one leaves every entry as it was.
IoResult Engine::replace_entries(const Extent& run, uint64_t entry, uint64_t step,
                                 bool release_old) {
    auto table = map_.l2_table(run.guest_offset);
    if (!table) return Unexpected{table.error()};
    const uint64_t bytes = run.first.kind == ClusterKind::Compressed
                               ? run.first.compressed_bytes
                               : run.first.referenced_bytes(geometry_) * run.clusters(geometry_);
    const bool release = release_old && bytes != 0;
    if (release) {
        auto counted = refcounts_.in_use(run.first.host_offset, bytes);
        if (!counted) return Unexpected{counted.error()};
        if (!*counted) return io_error();
    }
    map_.set_entries(*table, run.cluster_start(geometry_), run.clusters(geometry_), entry, step);
    // The entries are set: this request is done (an allocating write's clusters are linked, so
    // no error may send them back).  A failure to write a table from now on leaves it dirty,
    // and the guest's next flush, writing it again, reports it; clusters whose reference it
    // kept from dropping are leaked, never lost.
    if (release && refcount_cache_.set_dependency(l2_cache_))
        (void)refcounts_.release(run.first.host_offset, bytes);
    if (refcounts_.quarantine_full()) (void)flush_metadata();
    return Ok{};
}

IoResult Engine::discard(uint64_t offset, uint64_t length) {
    if (read_only_) return io_error(std::errc::read_only_file_system);
    if (auto in_range = check_range(offset, length); !in_range) return in_range;
    // Whole clusters only (a hint: the rest is left as it is); the disk's last cluster counts
    // as whole when the range reaches the end, as in QEMU.
    const uint64_t cs = geometry_.cluster_size();
    const uint64_t begin = (offset + cs - 1) / cs * cs;
    const uint64_t end = offset + length == size_ ? size_ : (offset + length) / cs * cs;
    return begin < end ? zero_clusters(begin, end, ZeroMode::Discard) : IoResult(Ok{});
}

IoResult Engine::write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) {
    if (read_only_) return io_error(std::errc::read_only_file_system);
    if (auto in_range = check_range(offset, length); !in_range) return in_range;
    const uint64_t cs = geometry_.cluster_size();
    uint64_t begin = std::min((offset + cs - 1) / cs * cs, offset + length);
    uint64_t end = std::max((offset + length) / cs * cs, begin);
    if (offset + length == size_) end = offset + length;       // the disk's last cluster is whole
    if (geometry_.version < 3) begin = end = offset + length;  // no zero flag: write zeroes
    if (auto head = write_zero_bytes(offset, begin - offset); !head) return head;
    if (begin < end) {
        const ZeroMode mode = may_unmap ? ZeroMode::WriteZeroesUnmap : ZeroMode::WriteZeroes;
        if (auto zeroed = zero_clusters(begin, end, mode); !zeroed) return zeroed;
    }
    return write_zero_bytes(end, offset + length - end);
}

IoResult Engine::write_zero_bytes(uint64_t offset, uint64_t length) {
    const GuestBuffers::Part zero(zeroes_.bytes());
    const GuestBuffers zeroes(std::span(&zero, 1));
    for (uint64_t done = 0; done < length;) {
        const uint64_t piece = std::min<uint64_t>(zeroes.size(), length - done);
        if (auto written = write(offset + done, zeroes.slice(0, piece)); !written) return written;
        done += piece;
    }
    return Ok{};
}

// QEMU's discard_in_l2_slice and zero_in_l2_slice, for images without subclusters.
std::optional<Engine::ZeroPlan> Engine::zero_plan(const Extent& run, ZeroMode mode) const {
    const L2Entry& old = run.first;
    const bool holds_clusters = old.referenced_bytes(geometry_) != 0;
    if (mode == ZeroMode::Discard) {
        // v3 reads a discarded cluster as zeroes; v2 can only let it fall through to the
        // backing file.  Nothing to do where it already reads as zeroes.
        if (!holds_clusters && (old.kind == ClusterKind::Zero || !backing_)) return std::nullopt;
        if (geometry_.version < 3 && old.kind == ClusterKind::Unallocated) return std::nullopt;
        return ZeroPlan{geometry_.version >= 3 ? kZeroFlag : 0, holds_clusters};
    }
    const bool unmap = old.kind == ClusterKind::Compressed ||
                       (mode == ZeroMode::WriteZeroesUnmap && holds_clusters);
    // Already zero; unlike QEMU, no L2 table is allocated to say so again.
    if ((old.kind == ClusterKind::Zero && !unmap) ||
        (old.kind == ClusterKind::Unallocated && !backing_))
        return std::nullopt;
    if (unmap || !holds_clusters) return ZeroPlan{kZeroFlag, unmap};
    // Keep the clusters, preallocated, and read them as zeroes.
    return ZeroPlan{old.host_offset | (old.copied ? kCopied : 0) | kZeroFlag, false};
}

IoResult Engine::zero_clusters(uint64_t begin, uint64_t end, ZeroMode mode) {
    for (uint64_t offset = begin; offset < end;) {
        auto zeroed = zero_run(offset, end, mode);
        if (!zeroed) return Unexpected{zeroed.error()};
        offset += *zeroed;
    }
    return Ok{};
}

// Zeroes or discards the clusters of one run from `offset` (cluster aligned); returns its
// length.
Written Engine::zero_run(uint64_t offset, uint64_t end, ZeroMode mode) {
    Lock lock(mutex_);
    for (;;) {
        auto run = map_.lookup(offset, end - offset);
        if (!run) return Unexpected{run.error()};
        if (in_flight(offset, offset + (run->clusters(geometry_) << geometry_.cluster_bits))) {
            allocation_done_.wait(lock);
            continue;
        }
        const auto plan = zero_plan(*run, mode);
        if (!plan) return run->length;
        if (auto prepared = map_.prepare_l2(offset); !prepared) return Unexpected{prepared.error()};
        const uint64_t step = (plan->entry & kOffsetMask) ? geometry_.cluster_size() : 0;
        if (auto zeroed = replace_entries(*run, plan->entry, step, plan->release); !zeroed)
            return Unexpected{zeroed.error()};
        return run->length;
    }
}

}  // namespace mvmm::devices::block::qcow2
