#include "vmm/disk_hotplug.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "vmm/cli/options.h"
#include "vmm/cli/usage_error.h"
#include "vmm/disks.h"

namespace mvmm {

namespace {

using nlohmann::json;

std::string option_value(const std::string& key, const json& value) {
    std::string text;
    if (value.is_string())
        text = value.get<std::string>();
    else if (value.is_boolean())
        text = value.get<bool>() ? "on" : "off";
    else if (value.is_number_integer() && value.get<int64_t>() >= 0)
        text = std::to_string(value.get<int64_t>());
    else
        throw std::invalid_argument(key + " must be a string, true/false or a whole number");
    if (text.find(',') != std::string::npos)
        throw std::invalid_argument(key + " cannot hold a ',' (--disk splits items there)");
    return text;
}

// The virtio-blk disk add-disk describes, by --disk's parser.
devices::virtio::blk::DiskConfig parse_hotplug_disk(const json& arguments, SlotSource alloc,
                                                    unsigned default_queues) {
    DiskOptions options;
    options.default_queues = default_queues;
    try {
        add_disk_option(disk_option_text(arguments), options, "add-disk");
    } catch (const UsageError& e) {
        throw std::invalid_argument(e.what());
    }
    auto config = options.blk.at(0);
    if (config.bus != devices::virtio::blk::DiskBus::RootPort)
        throw std::invalid_argument("bus=root: only root ports' slots are hot-pluggable");
    config.request_alloc = alloc;
    return config;
}

std::vector<LunHotplug::Controller> scsi_controllers(const std::vector<DiskView>& disks) {
    std::vector<LunHotplug::Controller> controllers;
    for (const DiskView& view : disks)
        if (view.scsi) controllers.push_back({view.id, view.scsi});
    return controllers;
}

}  // namespace

std::string disk_option_text(const json& arguments) {
    std::string text;
    for (const auto& [key, value] : arguments.items())
        text += (text.empty() ? "" : ",") + key + "=" + option_value(key, value);
    return text;
}

DiskHotplug::DiskHotplug(Context context, const std::vector<DiskView>& boot_disks)
    : context_(context),
      next_index_(static_cast<unsigned>(boot_disks.size())),
      luns_(scsi_controllers(boot_disks), context.cache_clean_interval),
      releaser_([this](std::stop_token stop) { serve_releases(stop); }) {
    for (const DiskView& view : boot_disks) disks_.push_back({view, false, State::Present});
    context_.pci.set_unplug_handler(
        [this](uint8_t port, std::shared_ptr<devices::pci::PciFunction> function) {
            std::lock_guard lock(queue_mutex_);
            queue_.push_back({port, std::move(function)});
            queue_cv_.notify_one();
        });
}

DiskHotplug::~DiskHotplug() {
    context_.pci.set_unplug_handler(nullptr);
    releaser_.request_stop();
    releaser_.join();
}

const char* DiskHotplug::state_name(State state) {
    switch (state) {
        case State::Removing:
            return "removing";
        case State::Closing:
            return "closing";
        case State::Present:
            break;
    }
    return "present";
}

uint8_t DiskHotplug::free_port() const {
    for (const auto& slot : context_.pci.slots())
        if (slot.free) return slot.port;
    throw std::runtime_error(
        "no free hot-pluggable root port (start mvmm with --root-ports N to reserve some)");
}

json DiskHotplug::add(const json& arguments) {
    if (LunHotplug::describes_lun(arguments)) return luns_.add(arguments);
    auto config = parse_hotplug_disk(arguments, context_.request_alloc, context_.default_queues);
    std::lock_guard lock(mutex_);
    const uint8_t port = free_port();
    std::unique_ptr<devices::virtio::blk::BlkDevice> device;
    try {
        device = std::make_unique<devices::virtio::blk::BlkDevice>(config, context_.io);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error("path=" + config.path + ": " + e.what());
    }
    const auto* counters = &device->counters();
    auto* image = &device->image();
    DiskResizer resize = blk_resizer(*device, config.path);
    auto function = std::make_shared<devices::virtio::pci::VirtioPciFunction>(
        std::move(device), context_.platform, context_.memory);
    context_.pci.plug(port, function);  // throws when the slot was taken meanwhile
    const DiskView view{fmt::format("disk{}", next_index_),
                        fmt::format("disk {} ({})", next_index_, config.path),
                        counters,
                        {image},
                        std::move(resize),
                        port};
    ++next_index_;
    ++added_;
    disks_.push_back({view, true, State::Present});
    context_.diagnostics.add_device(view.name, *counters);
    spdlog::info("{}: plugged into root port {}", view.name, port);
    if (const auto interval = image->cache_clean_interval(); interval.count() > 0)
        context_.cache_clean_interval(interval);
    return {{"id", view.id}, {"port", port}};
}

std::optional<uint64_t> DiskHotplug::resize(const std::string& path) {
    std::lock_guard lock(mutex_);
    std::optional<uint64_t> size;
    for (const Entry& e : disks_) {
        if (e.state != State::Present) continue;  // its device may be going away
        if (auto resized = e.view.resize(path)) size = resized;
    }
    return size;
}

json DiskHotplug::remove(const json& arguments) {
    const auto id = arguments.find("id");
    if (arguments.size() != 1 || id == arguments.end() || !id->is_string())
        throw std::invalid_argument("remove-disk takes {\"id\": ID} (query-disks lists them)");
    if (LunHotplug::names_lun(id->get<std::string>())) return luns_.remove(id->get<std::string>());
    std::lock_guard lock(mutex_);
    const auto entry =
        std::ranges::find(disks_, id->get<std::string>(), [](const Entry& e) { return e.view.id; });
    if (entry == disks_.end()) throw std::invalid_argument("no disk has id " + id->dump());
    if (entry->view.port == 0)
        throw std::runtime_error(entry->view.name + " is on the root bus: not hot-pluggable");
    if (entry->state != State::Present)
        throw std::runtime_error(entry->view.name + " is being removed already");
    context_.pci.request_unplug(entry->view.port);  // throws when the port is busy
    entry->state = State::Removing;
    spdlog::info("{}: removal requested (attention button of root port {})", entry->view.name,
                 entry->view.port);
    return {{"id", entry->view.id}, {"state", "removing"}};
}

json DiskHotplug::query() const {
    std::lock_guard lock(mutex_);
    json disks = json::array();
    for (const Entry& e : disks_)
        disks.push_back({{"id", e.view.id},
                         {"name", e.view.name},
                         {"port", e.view.port},
                         {"state", state_name(e.state)},
                         {"hotplugged", e.hotplugged}});
    json slots = json::array();
    for (const auto& slot : context_.pci.slots())
        slots.push_back({{"port", slot.port},
                         {"occupied", slot.occupied},
                         {"powered", slot.powered},
                         {"unplug_requested", slot.unplug_requested},
                         {"free", slot.free}});
    const auto regions = context_.mmio.stats().by_region;
    const auto bars = std::ranges::count_if(
        regions, [](const auto& r) { return r.name.find(" BAR") != std::string::npos; });
    for (auto& lun : luns_.query()) disks.push_back(std::move(lun));
    return {{"disks", disks},  {"slots", slots},        {"bar_regions", bars},
            {"added", added_}, {"released", released_}, {"release_ns", release_time_.count()}};
}

std::vector<DiskView> DiskHotplug::disks() const {
    std::lock_guard lock(mutex_);
    std::vector<DiskView> views;
    for (const Entry& e : disks_) views.push_back(e.view);
    return views;
}

void DiskHotplug::for_each_image(
    const std::function<void(devices::block::DiskImage&)>& visit) const {
    std::lock_guard lock(mutex_);
    for (const Entry& e : disks_)
        if (e.state != State::Closing)
            for (auto* image : e.view.images) visit(*image);
    luns_.for_each_image(visit);
}

void DiskHotplug::serve_releases(std::stop_token stop) {
    std::unique_lock lock(queue_mutex_);
    // On stop, what is queued is still destroyed here, off the I/O threads.
    while (queue_cv_.wait(lock, stop, [&] { return !queue_.empty(); }) || !queue_.empty()) {
        Released next = std::move(queue_.front());
        queue_.erase(queue_.begin());
        lock.unlock();
        finish_release(std::move(next));
        lock.lock();
    }
}

void DiskHotplug::finish_release(Released released) {
    std::string name = fmt::format("the device of root port {}", released.port);
    const devices::virtio::QueueCounters* counters = nullptr;
    {
        std::lock_guard lock(mutex_);
        const auto entry = std::ranges::find_if(disks_, [&](const Entry& e) {
            return e.view.port == released.port && e.state != State::Closing;
        });
        if (entry != disks_.end()) {
            entry->state = State::Closing;
            name = entry->view.name;
            counters = entry->view.counters;
        }
    }
    if (counters) context_.diagnostics.remove_device(*counters);
    const auto started = std::chrono::steady_clock::now();
    // Stops the queues once their requests finish, flushes and closes the image, frees the
    // MSI-X vectors: the last reference, the bus let go of it.
    released.function.reset();
    const auto took = std::chrono::steady_clock::now() - started;
    std::lock_guard lock(mutex_);
    // A new disk may be in the port already: only the one closed here goes.
    std::erase_if(disks_, [&](const Entry& e) {
        return e.view.port == released.port && e.state == State::Closing;
    });
    ++released_;
    release_time_ += took;
    spdlog::info("{}: released by the guest; flushed and closed in {:.1f} ms", name,
                 std::chrono::duration<double, std::milli>(took).count());
}

}  // namespace mvmm
