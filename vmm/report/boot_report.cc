#include "vmm/report/boot_report.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>

#include "rcu/trim.h"

#include "vmm/cli/usage_error.h"

namespace mvmm {

namespace {

constexpr const char* kEventNames[] = {"ram_ready",     "devices_ready",     "guest_loaded",
                                       "first_kvm_run", "first_serial_byte", "guest_stopped",
                                       "exit"};

template <class T>
nlohmann::json or_null(const std::optional<T>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// The marks at which the heap is read besides the one after the disks: the end of io-bench's
// workload and the guest's poweroff, while the devices (and their caches) are all still there.
constexpr std::string_view kHeapMarks[] = {"io-done", "poweroff"};

// [heap] from smaps, and what malloc holds in all its arenas and how much of it is in use
// (mallinfo2's arena + hblkhd, uordblks: a table in a free chunk grows the one, not [heap]).
nlohmann::json heap_now(const std::string& after_mark) {
    const auto smaps = api::read_smaps();
    const auto totals = rcu::malloc_totals();
    return {{"t", ns_since_start()},
            {"after_mark", after_mark},
            {"rss_bytes", smaps.heap_rss_bytes},
            {"size_bytes", smaps.heap_size_bytes},
            {"malloc_bytes", totals ? nlohmann::json(totals->arena + totals->hblkhd) : nullptr},
            {"malloc_in_use_bytes", totals ? nlohmann::json(totals->uordblks) : nullptr}};
}

bool write_all(int fd, std::string_view text) {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        text.remove_prefix(size_t(n));
    }
    return true;
}

}  // namespace

BootReport::BootReport(const std::string& path)
    : file_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)), path_(path) {
    if (!file_.valid())
        throw UsageError("--report: cannot write '" + path + "': " + std::strerror(errno));
    for (auto& e : events_) e = -1;
}

void BootReport::stamp(BootEvent event) noexcept {
    int64_t unset = -1;
    events_[size_t(event)].compare_exchange_strong(unset, ns_since_start());
}

void BootReport::serial_byte(uint8_t byte) {
    std::lock_guard lock(console_mutex_);
    if (events_[size_t(BootEvent::FirstSerialByte)] < 0) stamp(BootEvent::FirstSerialByte);
    if (auto mark = reader_.feed(byte)) {
        mark->t_ns = ns_since_start();
        mark_seen(std::move(*mark));
    }
}

void BootReport::mark_seen(GuestMark mark) {
    // The heap once every disk is up: at the first marker after the last `disk` marker.
    const bool after_disks = !marks_.empty() && marks_.back().name == "disk";
    if (after_disks && mark.name != "disk" && !heap_after_disks_)
        heap_after_disks_ = heap_now(mark.name);
    if (std::ranges::find(kHeapMarks, mark.name) != std::end(kHeapMarks))
        heap_at_marks_[mark.name] = heap_now(mark.name);
    if (marks_.size() < kMaxMarks)
        marks_.push_back(std::move(mark));
    else
        ++marks_dropped_;
}

void BootReport::stopping(const std::string& reason) {
    std::lock_guard lock(exit_mutex_);
    if (!reason_) reason_ = reason;
}

void BootReport::set_figures(ExitFigures figures) {
    std::lock_guard lock(exit_mutex_);
    figures_ = std::move(figures);
}

nlohmann::json BootReport::timeline() const {
    nlohmann::json t = nlohmann::json::object();
    for (size_t i = 0; i < kEvents; ++i) {
        const int64_t at = events_[i];
        t[kEventNames[i]] = at < 0 ? nlohmann::json(nullptr) : nlohmann::json(at);
    }
    return t;
}

nlohmann::json BootReport::marks() const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : marks_) {
        nlohmann::json fields = nlohmann::json::object();
        for (const auto& [k, v] : m.fields) fields[k] = v;
        list.push_back({{"name", m.name},
                        {"t", m.t_ns},
                        {"guest_uptime_s", or_null(m.guest_uptime_s)},
                        {"fields", fields}});
    }
    return list;
}

nlohmann::json BootReport::document(int exit_code) {
    std::optional<std::string> reason;
    std::optional<ExitFigures> figures;
    {
        std::lock_guard lock(exit_mutex_);
        reason = reason_;
        figures = figures_;
    }
    if (!figures) figures = ExitFigures{read_process_figures(), std::nullopt};
    nlohmann::json doc = {
        {"format", "mvmm-boot-report"},
        {"version", 1},
        {"mvmm_version", MVMM_VERSION},
        {"exit", {{"code", exit_code}, {"reason", or_null(reason)}}},
        {"clock",
         {{"unit", "ns"},
          {"origin", "process start"},
          {"origin_monotonic_ns",
           std::chrono::duration_cast<std::chrono::nanoseconds>(process_start().time_since_epoch())
               .count()}}},
        {"timeline", timeline()}};
    doc.update(figures_json(*figures));
    std::lock_guard lock(console_mutex_);
    doc["marks"] = marks();
    doc["marks_dropped"] = marks_dropped_;
    doc["memory"]["heap_after_disks"] = heap_after_disks_ ? *heap_after_disks_ : nullptr;
    doc["memory"]["heap_at_marks"] = heap_at_marks_;
    doc["timeline"]["devices"] = device_timeline_json(*figures);
    return doc;
}

bool BootReport::write(int exit_code) {
    stamp(BootEvent::Exit);
    const std::string text = document(exit_code).dump(2) + "\n";
    if (write_all(file_.get(), text)) return true;
    spdlog::error("--report: cannot write '{}': {}", path_, std::strerror(errno));
    return false;
}

}  // namespace mvmm
