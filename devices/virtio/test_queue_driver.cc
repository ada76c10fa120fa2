#include "devices/virtio/test_queue_driver.h"

#include <stdexcept>

namespace mvmm::devices::virtio::testing {

TestGuest::TestGuest(uint64_t ram_size)
    : memory_([&] {
          std::vector<RamRegion> regions;
          regions.push_back(RamRegion{GuestAddr(0), Mapping::anonymous(ram_size)});
          return regions;
      }()) {}

GuestAddr TestGuest::alloc(uint64_t size, uint64_t alignment) {
    const uint64_t start = (next_free_ + alignment - 1) / alignment * alignment;
    if (start + size > memory_.total_size()) throw std::runtime_error("test guest RAM exhausted");
    next_free_ = start + size;
    return GuestAddr(start);
}

void TestGuest::write(GuestAddr addr, std::span<const uint8_t> bytes) const {
    if (!memory_.write_bytes(addr, bytes)) throw std::out_of_range("test write outside RAM");
}

std::vector<uint8_t> TestGuest::read(GuestAddr addr, uint64_t size) const {
    std::vector<uint8_t> out(size);
    if (!memory_.read_bytes(addr, out)) throw std::out_of_range("test read outside RAM");
    return out;
}

TestDriver::TestDriver(TestGuest& guest, uint16_t size)
    : guest_(guest),
      size_(size),
      desc_(guest.alloc(16ull * size, 16)),
      avail_(guest.alloc(6 + 2ull * size, 2)),
      used_(guest.alloc(6 + 8ull * size, 4)) {}

QueueConfig TestDriver::config() const {
    return QueueConfig{.size = size_, .desc = desc_, .avail = avail_, .used = used_, .ready = true};
}

template <class T>
void TestDriver::put(GuestAddr addr, const T& value) const {
    guest_.write(addr, std::span(reinterpret_cast<const uint8_t*>(&value), sizeof value));
}

template <class T>
T TestDriver::get(GuestAddr addr) const {
    auto value = guest_.memory().read<T>(addr);
    if (!value) throw std::out_of_range("test read outside RAM");
    return *value;
}

void TestDriver::set_descriptor(uint16_t index, const Desc& desc) {
    put(desc_ + 16ull * index, desc);
}

void TestDriver::publish(uint16_t head) {
    put(avail_ + 4 + 2ull * (avail_idx_ % size_), head);
    set_avail_idx(avail_idx_ + 1);
}

// Ring indices are published and read like a real driver does: release and acquire.
GuestSlice TestDriver::ring_index(GuestAddr addr) const {
    auto field = guest_.memory().slice(addr, sizeof(uint16_t));
    if (!field) throw std::out_of_range("test ring index outside RAM");
    return *field;
}

void TestDriver::set_avail_idx(uint16_t idx) {
    avail_idx_ = idx;
    ring_index(avail_ + 2).store<uint16_t>(0, idx, std::memory_order_release);
}

void TestDriver::set_avail_flags(uint16_t flags) {
    put(avail_, flags);
}
void TestDriver::set_used_event(uint16_t idx) {
    put(avail_ + 4 + 2ull * size_, idx);
}

uint16_t TestDriver::next_descriptor() {
    const uint16_t index = free_descriptor_;
    free_descriptor_ = (free_descriptor_ + 1) % size_;
    return index;
}

namespace {
// One link of a chain: NEXT unless it is the last.
Desc link(const TestDriver::Buffer& buffer, bool last, uint16_t next) {
    return Desc{.addr = buffer.addr.value(),
                .len = buffer.len,
                .flags = uint16_t((buffer.writable ? kDescWrite : 0) | (last ? 0 : kDescNext)),
                .next = last ? uint16_t(0) : next};
}
}  // namespace

uint16_t TestDriver::add_chain(std::span<const Buffer> buffers) {
    std::vector<uint16_t> indices;
    for (size_t i = 0; i < buffers.size(); ++i) indices.push_back(next_descriptor());
    for (size_t i = 0; i < buffers.size(); ++i) {
        const bool last = i + 1 == buffers.size();
        set_descriptor(indices[i], link(buffers[i], last, last ? 0 : indices[i + 1]));
    }
    publish(indices.front());
    return indices.front();
}

uint16_t TestDriver::add_indirect_chain(std::span<const Buffer> buffers) {
    const GuestAddr table = guest_.alloc(16 * buffers.size(), 16);
    for (size_t i = 0; i < buffers.size(); ++i)
        put(table + 16 * i, link(buffers[i], i + 1 == buffers.size(), uint16_t(i + 1)));
    const uint16_t head = next_descriptor();
    set_descriptor(
        head,
        Desc{.addr = table.value(), .len = uint32_t(16 * buffers.size()), .flags = kDescIndirect});
    publish(head);
    return head;
}

uint16_t TestDriver::used_idx() const {
    return ring_index(used_ + 2).load<uint16_t>(0, std::memory_order_acquire);
}
uint16_t TestDriver::used_flags() const {
    return get<uint16_t>(used_);
}
uint16_t TestDriver::avail_event() const {
    return get<uint16_t>(used_ + 4 + 8ull * size_);
}

UsedElement TestDriver::used(uint16_t position) const {
    return get<UsedElement>(used_ + 4 + 8ull * (position % size_));
}

}  // namespace mvmm::devices::virtio::testing
