// Queue processing shared by the virtio devices (blk, scsi).  Each ready queue gets a worker
// between activate() and reset(): it waits for its kick eventfd on the Boost.Asio io_context
// the VMM runs on its I/O threads, drains the ring in batches (one queue on one thread at a
// time: a worker has one handler queued at a time), hands every chain to the device's
// RequestHandler and interrupts the driver.  Data flows one way: the worker is given
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
#include "devices/virtio/slot_pool.h"
#include "devices/virtio/virtio_device.h"

namespace boost::asio {
class io_context;
}

namespace mvmm::devices::virtio {

// The device side of one queue: handles one chain (parse, execute, write the status) and
// returns how many bytes it wrote into the chain's writable buffers.  Called on an I/O
// thread, one chain at a time per queue; a handler shared by several queues must be
// thread-safe.  A guest mistake is the handler's to answer; an exception stops the queue.
class RequestHandler {
  public:
    virtual ~RequestHandler() = default;
    virtual uint32_t handle(const DescriptorChain& chain) = 0;
};

// The workers of one device's queues, from activation to reset.
class QueueWorkers {
  public:
    // Picks the handler of queue `index`; nullptr leaves the queue alone (the driver's
    // buffers stay with the device, as virtio-scsi's event queue wants).
    using HandlerFor = std::function<RequestHandler*(uint16_t index)>;

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

    // Waits for the batches in progress (and so for every request in flight) to finish;
    // after it returns no worker touches guest memory, a handler or the interrupt again.
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
