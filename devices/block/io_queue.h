// Asynchronous I/O on a disk image: many operations in flight for one virtqueue, each started
// and completed on the queue's own serialized context (its queue worker), never on a thread of
// the backend.  Three backends behind one interface (aio= on --disk):
//   io_uring  readv/writev/fsync/fallocate as SQEs on the image's file, for images whose guest
//             offsets are file offsets (raw); a ring per queue (see README.md).
//   threads   the image's blocking calls on a shared thread pool (any format: qcow2's metadata
//             work is synchronous), completions handed back through an eventfd.
//   sync      the blocking call at once, on the queue's context: one request at a time, as
//             before io_uring (kept to compare).
// An operation lives in the caller's request (an IoRequest in a request slot); the queue never
// allocates per operation.  With cache=none (O_DIRECT) guest buffers the image cannot take as
// they are go through bounce buffers from a pool of the queue (one mapping).
// Reads (or writes) submitted one after another whose ranges follow each other go to the host
// as one step, as QEMU's virtio-blk merges a batch's requests: a sequential guest stream costs
// the host (and, through fewer completions, the guest) one call per run instead of one per
// request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "devices/block/disk_image.h"
#include "mem/guest_buffers.h"
#include "mem/slot_pool.h"

namespace mvmm::devices::block {

std::string_view to_string(AioMode mode);
// Whether this kernel lets mvmm set up an io_uring (probed once, by setting one up: kernels
// without it, or with it disabled by sysctl or seccomp, refuse).
bool io_uring_supported();
// io_uring where the kernel has it, else threads.
AioMode default_aio_mode();
// aio= as given for the image at `path`, else default_aio_mode(); throws ImageError for
// io_uring on a kernel that refuses it.
AioMode checked_aio_mode(std::optional<AioMode> aio, const std::string& path);

struct IoOp {
    enum class Kind : uint8_t { Read, Write, Flush, Discard, WriteZeroes };
    Kind kind = Kind::Read;
    bool may_unmap = false;     // WriteZeroes
    uint64_t offset = 0;        // bytes on the disk
    uint64_t length = 0;        // Discard, WriteZeroes
    GuestBuffers buffers = {};  // Read: filled; Write: written
};

// One host call of an operation: a whole flush, discard or write-zeroes, or the part of a
// transfer still to move (a bounce window with cache=none).  What the backends carry out.
struct IoStep {
    IoOp::Kind kind = IoOp::Kind::Read;
    bool may_unmap = false;
    uint64_t offset = 0;
    uint64_t length = 0;
    GuestBuffers buffers = {};  // Read, Write: `length` bytes
};

// Carries out `step` with `image`'s blocking calls: bytes moved (transfers), 0, or -errno.
int64_t run_step(DiskImage& image, const IoStep& step);

// A job the shared thread pool runs (thread_pool.h), kept in what it works for.
struct PoolJob {
    void (*run)(PoolJob& job) = nullptr;
    void* owner = nullptr;  // what run() works for
    void* item = nullptr;
    PoolJob* next = nullptr;
};

// One operation in flight, embedded in what lives while its request is in flight; it must stay
// in place from IoQueue::submit() until io_done().
class IoRequest {
  public:
    // On the queue's context, from IoQueue::progress(): the whole operation succeeded, or why
    // not.  The request may be destroyed (or submitted again) from here on.
    virtual void io_done(IoResult result) = 0;

    // The queue's bookkeeping while the operation is in flight; its owner leaves it alone.
    struct Flight {
        IoOp op;
        IoStep step;                            // the one in flight
        uint64_t moved = 0;                     // Read, Write: bytes done so far
        int64_t result = 0;                     // of the last step: bytes moved, or -errno
        std::optional<SlotPool::Slot> bounce;   // cache=none: the aligned copy of the buffers
        GuestBuffers::Part bounce_part;         // a view of it
        std::optional<SlotPool::Slot> scratch;  // the backend's (io_uring: the step's iovecs)
        PoolJob job;                            // threads: the step as the pool runs it
        IoRequest* next = nullptr;              // on one of the queue's lists at a time
        // A merged step: the first operation's `step` covers the run and holds its parts (a
        // slot of the queue's), each operation names the next one of the run.
        std::optional<SlotPool::Slot> run_parts;
        IoRequest* run_next = nullptr;
    };
    Flight flight;

  protected:
    IoRequest() = default;
    ~IoRequest() = default;
    IoRequest(const IoRequest&) = delete;
    IoRequest& operator=(const IoRequest&) = delete;
};

// The queue of one virtqueue: used by one context at a time (not thread-safe), which calls
// progress() when completion_fd() is readable.  Destroy it only once every operation submitted
// is done.
class IoQueue {
  public:
    virtual ~IoQueue() = default;
    IoQueue(const IoQueue&) = delete;
    IoQueue& operator=(const IoQueue&) = delete;

    // Takes `op` for `request`; the next progress() hands it to the host (merged with the
    // transfers submitted just before and after it that continue each other's ranges), and it
    // completes in that progress() or a later one, never in submit().  Read and write buffers
    // must be whole 512-byte sectors at most the queue's depth of pieces.
    // Never throws: a step the host refuses to take (no room in a ring, no memory) ends the
    // operation with EIO, as one of its own later steps does (a window of bounced buffers).
    void submit(IoRequest& request, const IoOp& op) noexcept;
    // Hands the operations submitted so far to the host, and calls io_done() of each finished
    // one (which may submit more, also handled here).  Returns how many finished.
    size_t progress();
    // An eventfd, readable when progress() has something to finish; the caller reads it (to
    // reset it) before calling progress().  -1: every operation finishes in the progress()
    // after its submit() (sync).
    virtual int completion_fd() const noexcept = 0;

  protected:
    // `depth`: the most operations in flight at once.
    IoQueue(DiskImage& image, uint32_t depth);

    // Starts `request.flight.step`, whose end goes to finished() (from poll(), or at once for
    // the sync backend).
    virtual void issue(IoRequest& request) = 0;
    // Hands the issued steps to the host; reports each one that finished to finished().
    virtual void poll() = 0;
    // A step ended with `result`: bytes moved (transfers), 0 (the rest), or -errno.
    void finished(IoRequest& request, int64_t result) noexcept;
    // issue(), and what the host refused to take (an exception) finished with EIO: its
    // operation completes with an error instead of being lost, which would leave a reset
    // waiting for it for ever.  Logs the first refusal.
    void issue_or_fail(IoRequest& request) noexcept;

    DiskImage& image_;
    const uint32_t depth_;

  private:
    // A list of requests linked through flight.next, in order.
    struct List {
        IoRequest* head = nullptr;
        IoRequest* tail = nullptr;
        void push(IoRequest& request) noexcept;
        IoRequest* pop() noexcept;
    };

    void prepare_step(IoRequest& request);
    void next_step(IoRequest& request);
    void issue_submitted();
    void merge_run(IoRequest& first);
    size_t split_run(IoRequest& first);
    bool advance(IoRequest& request);  // true when the operation is done
    void complete(IoRequest& request, IoResult result);

    bool refusal_logged_ = false;
    std::optional<SlotPool> bounce_pool_;  // only for images that need aligned buffers
    SlotPool run_parts_pool_;              // the parts of merged steps
    List submitted_;                       // operations not yet handed to the host, in order
    List finished_;                        // steps that ended, in order
};

// The sync backend, for any image.
std::unique_ptr<IoQueue> open_sync_queue(DiskImage& image, uint32_t depth);

}  // namespace mvmm::devices::block
