#include "vmm/lun_hotplug.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <stdexcept>

#include "vmm/cli/options.h"
#include "vmm/cli/usage_error.h"
#include "vmm/disk_hotplug.h"

namespace mvmm {

namespace {

using nlohmann::json;
namespace scsi = devices::virtio::scsi;

struct LunId {
    std::string controller;
    uint8_t target = 0;
    uint16_t lun = 0;
};

std::string id_of(const std::string& controller, uint8_t target, uint16_t lun) {
    return fmt::format("{}:{}:{}", controller, target, lun);
}

// "CONTROLLER:TARGET:LUN" (the controller's id may hold ':' too: the last two are the numbers).
std::optional<LunId> parse_lun_id(const std::string& id) {
    const auto second = id.rfind(':');
    if (second == std::string::npos || second == 0) return std::nullopt;
    const auto first = id.rfind(':', second - 1);
    if (first == std::string::npos || first == 0) return std::nullopt;
    const auto number = [&](size_t from, size_t to, uint32_t max) -> std::optional<uint32_t> {
        uint32_t value = 0;
        const auto [end, error] = std::from_chars(id.data() + from, id.data() + to, value);
        if (error != std::errc() || end != id.data() + to || from == to || value > max)
            return std::nullopt;
        return value;
    };
    const auto target = number(first + 1, second, scsi::kMaxTarget);
    const auto lun = number(second + 1, id.size(), scsi::kMaxLun);
    if (!target || !lun) return std::nullopt;
    return LunId{id.substr(0, first), static_cast<uint8_t>(*target), static_cast<uint16_t>(*lun)};
}

}  // namespace

LunHotplug::LunHotplug(std::vector<Controller> controllers,
                       std::function<void(std::chrono::seconds)> cache_clean_interval)
    : controllers_(std::move(controllers)),
      cache_clean_interval_(std::move(cache_clean_interval)) {}

bool LunHotplug::describes_lun(const json& arguments) {
    return arguments.contains("controller");
}

bool LunHotplug::names_lun(const std::string& id) {
    return parse_lun_id(id).has_value();
}

const LunHotplug::Controller& LunHotplug::controller(const std::string& id) const {
    const auto found = std::ranges::find(controllers_, id, &Controller::id);
    if (found == controllers_.end())
        throw std::invalid_argument("no SCSI controller has id " + json(id).dump());
    return *found;
}

json LunHotplug::add(const json& arguments) {
    std::lock_guard lock(mutex_);
    // --disk's parser, against the LUNs present now: it picks a free LUN number without lun=
    // and refuses a LUN number or a serial taken.
    DiskOptions options;
    for (const Controller& c : controllers_) {
        ScsiControllerOption option;
        option.controller.id = c.id;
        c.scsi->for_each_lun([&](uint8_t target, uint16_t lun, scsi::Lun& present) {
            option.controller.luns.push_back({.path = present.image().path(),
                                              .lun = lun,
                                              .serial = present.identity().serial,
                                              .target = target});
        });
        options.scsi.push_back(std::move(option));
    }
    const auto before = options.scsi;
    try {
        add_disk_option(disk_option_text(arguments), options, "add-disk");
    } catch (const UsageError& e) {
        throw std::invalid_argument(e.what());
    }
    size_t index = 0;
    while (options.scsi[index].controller.luns.size() == before[index].controller.luns.size())
        ++index;  // the parser added one LUN, to the controller named
    const Controller& c = controllers_[index];
    const scsi::LunConfig config = options.scsi[index].controller.luns.back();
    try {
        c.scsi->add_lun(config);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error("path=" + config.path + ": " + e.what());
    }
    const std::string id = id_of(c.id, config.target, config.lun);
    hotplugged_.push_back(id);
    spdlog::info("scsi {}: LUN {} of target {} added ({})", c.id, config.lun, config.target,
                 config.path);
    const auto interval =
        c.scsi->target(config.target)->find(config.lun)->image().cache_clean_interval();
    if (interval.count() > 0) cache_clean_interval_(interval);
    return {{"id", id}, {"controller", c.id}, {"target", config.target}, {"lun", config.lun}};
}

json LunHotplug::remove(const std::string& id) {
    const auto lun = parse_lun_id(id);
    if (!lun) throw std::invalid_argument(json(id).dump() + " is not a LUN's id");
    std::lock_guard lock(mutex_);
    const Controller& c = controller(lun->controller);
    auto removed = c.scsi->remove_lun(lun->target, lun->lun);
    std::erase(hotplugged_, id);
    std::erase_if(closing_, [](const Closing& e) { return e.lun.expired(); });
    const bool closed = removed.expired();  // no command held it
    if (!closed) closing_.push_back({id, std::move(removed)});
    spdlog::info("scsi {}: LUN {} of target {} removed{}", c.id, lun->lun, lun->target,
                 closed ? ", its image closed" : "; its image closes after its last command");
    return {{"id", id}, {"state", closed ? "closed" : "closing"}};
}

json LunHotplug::query() const {
    std::lock_guard lock(mutex_);
    json luns = json::array();
    for (const Controller& c : controllers_) {
        c.scsi->for_each_lun([&](uint8_t target, uint16_t number, scsi::Lun& lun) {
            const std::string id = id_of(c.id, target, number);
            luns.push_back({{"id", id},
                            {"name", fmt::format("scsi {} LUN {}:{} ({})", c.id, target, number,
                                                 lun.image().path())},
                            {"controller", c.id},
                            {"target", target},
                            {"lun", number},
                            {"state", "present"},
                            {"hotplugged", std::ranges::count(hotplugged_, id) > 0}});
        });
    }
    std::erase_if(closing_, [](const Closing& e) { return e.lun.expired(); });
    for (const Closing& e : closing_) luns.push_back({{"id", e.id}, {"state", "closing"}});
    return luns;
}

void LunHotplug::for_each_image(
    const std::function<void(devices::block::DiskImage&)>& visit) const {
    for (const Controller& c : controllers_)
        c.scsi->for_each_lun([&](uint8_t, uint16_t, scsi::Lun& lun) { visit(lun.image()); });
}

}  // namespace mvmm
