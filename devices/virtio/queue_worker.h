// Queue processing shared by the virtio devices (blk, scsi).  Each ready queue gets a worker
// between activate() and reset(): it waits for its kick eventfd and its handler's completions
// on the Boost.Asio io_context the VMM runs on its I/O threads (one queue on one thread at a
// time: a worker has one Asio handler queued at a time), starts every chain the ring holds on
// the device's AsyncRequestHandler, up to a queue's worth in flight, returns them to the
// driver as they complete and interrupts it.  Data flows one way: the worker is given
// its queue, handler, interrupt and counters, and never calls back into the device.
// Every request in flight lives in a slot of its queue's SlotPool (mem/slot_pool.h), so the
// request path allocates nothing (see README.md, "Requests in flight").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "devices/virtio/queue.h"
#include "devices/virtio/queue_counters.h"
#include "devices/virtio/virtio_device.h"
#include "mem/slot_pool.h"

namespace boost::asio {
class io_context;
}

namespace mvmm::devices::virtio {

class InFlight;

// The device side of one queue: starts each chain's request and completes it, at once or
// later; the worker keeps up to a queue's worth of requests in flight.  Every call comes from
// the queue's context (one thread at a time: an I/O thread, or the thread in
// QueueWorkers::stop()); a handler shared by several queues must be thread-safe.  A guest
// mistake is the handler's to answer; an exception stops the queue (one from start() means
// the request was not started: it is never completed).
class AsyncRequestHandler {
  public:
    virtual ~AsyncRequestHandler() = default;
    // Bytes the handler keeps per request in its slot (InFlight::state()), for a queue of
    // `queue_size` entries.
    virtual size_t state_bytes(uint16_t /*queue_size*/) const { return 0; }
    // Starts `request`: request.complete() follows exactly once, from start() or from a later
    // progress().
    virtual void start(InFlight& request) = 0;
    // Hands what start() began to the host and completes what finished.  The worker calls it
    // after each batch of start()s and whenever completion_fd() was readable.
    virtual void progress() {}
    // An eventfd that becomes readable when progress() has requests to complete (the worker
    // reads it); -1 when every request completes in start() or the progress() after it.
    virtual int completion_fd() const noexcept { return -1; }
};

// A handler that runs each chain to the end in handle(): one request at a time per queue.
class RequestHandler : public AsyncRequestHandler {
  public:
    // Handles one chain (parse, execute, write the status) and returns how many bytes it wrote
    // into the chain's writable buffers.
    virtual uint32_t handle(const DescriptorChain& chain) = 0;
    void start(InFlight& request) final;
};

// One request between start() and complete(), in its slot of the queue's SlotPool: its chain,
// and room for the handler's state.
class InFlight {
  public:
    const DescriptorChain& chain() const noexcept { return chain_; }
    // state_bytes() bytes, aligned for any type; the handler constructs and destroys what it
    // keeps there (before complete(): the slot goes with it).
    std::byte* state() const noexcept { return state_; }
    // Returns the chain to the driver with `written` bytes used.  Exactly once, on the queue's
    // context; the request is gone when it returns.
    void complete(uint32_t written);

    // The worker's side: what completes a request.
    class Owner {
      public:
        virtual void complete(InFlight& request, uint32_t written) = 0;

      protected:
        ~Owner() = default;
    };
    InFlight(Owner& owner, const DescriptorChain& chain, SlotPool::Slot slot, std::byte* state)
        : owner_(owner), chain_(chain), slot_(std::move(slot)), state_(state) {}
    // The slot it lives in, handed back when the worker is done with it.
    SlotPool::Slot take_slot() noexcept { return std::move(slot_); }

  private:
    Owner& owner_;
    const DescriptorChain chain_;
    SlotPool::Slot slot_;
    std::byte* const state_;
};

// The workers of one device's queues, from activation to reset.
class QueueWorkers {
  public:
    // Picks the handler of queue `index`; nullptr leaves the queue alone (the driver's
    // buffers stay with the device, as virtio-scsi's event queue wants).
    using HandlerFor = std::function<AsyncRequestHandler*(uint16_t index)>;

    // `name` prefixes log lines ("virtio-blk disk.img").  `io` and `counters` must outlive
    // the workers.  `request_alloc` is where requests in flight live: a pool per queue, or
    // the heap per request (for comparison, as QEMU did).
    QueueWorkers(boost::asio::io_context& io, std::string name, QueueCounters& counters,
                 SlotSource request_alloc = SlotSource::pool);
    ~QueueWorkers();  // stop()
    QueueWorkers(const QueueWorkers&) = delete;
    QueueWorkers& operator=(const QueueWorkers&) = delete;

    // Stops the previous workers, checks `context` (num_queues queues and kick eventfds, the
    // layout of every ready queue) and starts a worker on each ready queue.  Returns false, logging
    // why, when a queue is unusable; then no worker runs.  `context.memory` and `context.interrupt`
    // must stay valid until stop().  Called when the driver sets DRIVER_OK, which the counters
    // record, with the new queues' request pools.
    bool start(const ActivateContext& context, uint16_t num_queues, uint16_t max_queue_size,
               const HandlerFor& handler_for);

    // Waits for the batches in progress and for every request in flight to complete (the
    // completions are taken here, on the caller's thread, into the used ring, without an
    // interrupt); after it returns no worker touches guest memory, a handler or the interrupt
    // again.
    // Called from a vCPU or the main thread, never from an I/O thread (it would wait for
    // itself).  Safe to call twice.
    void stop();

  private:
    class Worker;

    boost::asio::io_context& io_;
    std::string name_;
    QueueCounters& counters_;
    SlotSource request_alloc_;
    std::vector<std::shared_ptr<Worker>> workers_;
};

}  // namespace mvmm::devices::virtio
