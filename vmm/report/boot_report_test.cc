// The boot report: guest markers from console bytes, the timeline, the figures, the document's
// stable field names, and writing it.
#include "vmm/report/boot_report.h"

#include <gtest/gtest.h>
#include <linux/kvm.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "rcu/trim.h"
#include "vmm/cli/config.h"
#include "vmm/cli/usage_error.h"

namespace mvmm {
namespace {

// A report file in the temporary folder, removed at the end of the test.
struct TempPath {
    explicit TempPath(const std::string& name)
        : path(std::filesystem::temp_directory_path() /
               ("boot-report-test." + name + "." + std::to_string(::getpid()) + ".json")) {}
    ~TempPath() { std::filesystem::remove(path); }
    operator std::string() const { return path; }
    std::filesystem::path path;
};

void type(BootReport& report, const std::string& text) {
    for (char c : text) report.serial_byte(uint8_t(c));
}

TEST(GuestMarks, ParsesNameUptimeAndFields) {
    auto mark = parse_mark("\x1b[2JMVMM-MARK disk 3.62 name=vda size_bytes=67108864 ro=0 junk");
    ASSERT_TRUE(mark);
    EXPECT_EQ(mark->name, "disk");
    EXPECT_DOUBLE_EQ(*mark->guest_uptime_s, 3.62);
    using Field = std::pair<std::string, std::string>;
    EXPECT_EQ(mark->fields,
              (std::vector<Field>{{"name", "vda"}, {"size_bytes", "67108864"}, {"ro", "0"}}));
}

TEST(GuestMarks, UptimeIsOptional) {
    auto mark = parse_mark("MVMM-MARK custom key=value");
    ASSERT_TRUE(mark);
    EXPECT_FALSE(mark->guest_uptime_s);
    EXPECT_EQ(mark->fields.size(), 1u);
    EXPECT_FALSE(parse_mark("MVMM-MARK "));
    EXPECT_FALSE(parse_mark("MVMM-MARKER init 1.0"));
    EXPECT_FALSE(parse_mark("[    0.000000] Linux version 6.1"));
}

TEST(GuestMarks, ReaderSplitsLinesAndBoundsThem) {
    MarkReader reader;
    std::vector<std::string> names;
    const std::string text = "noise\r\nMVMM-MARK init 1.5\r\n" + std::string(5000, 'x') +
                             "MVMM-MARK lost 2.0\nMVMM-MARK cpus 3.0 online=2\n";
    for (char c : text)
        if (auto mark = reader.feed(uint8_t(c))) names.push_back(mark->name);
    EXPECT_EQ(names, (std::vector<std::string>{"init", "cpus"}));
}

TEST(BootReport, FirstStampOfAnEventCounts) {
    BootReport report(TempPath("first-stamp"));
    report.stamp(BootEvent::RamReady);
    const auto first = report.document(0)["timeline"]["ram_ready"].get<int64_t>();
    report.stamp(BootEvent::RamReady);
    const auto doc = report.document(0);
    EXPECT_EQ(doc["timeline"]["ram_ready"].get<int64_t>(), first);
    EXPECT_GE(first, 0);
    EXPECT_TRUE(doc["timeline"]["first_kvm_run"].is_null());
}

TEST(BootReport, ConsoleGivesFirstByteMarksAndTheHeapAfterTheDisks) {
    BootReport report(TempPath("console"));
    type(report, "Linux\nMVMM-MARK init 2.9\n");
    auto doc = report.document(0);
    EXPECT_TRUE(doc["memory"]["heap_after_disks"].is_null());
    type(report, "MVMM-MARK disk 3.6 name=vda\nMVMM-MARK disk 3.7 name=vdb\nMVMM-MARK cpus 3.8\n");
    doc = report.document(0);
    const auto& marks = doc["marks"];
    ASSERT_EQ(marks.size(), 4u);
    EXPECT_EQ(marks[1]["fields"]["name"], "vda");
    EXPECT_EQ(marks[3]["guest_uptime_s"], 3.8);
    EXPECT_LE(doc["timeline"]["first_serial_byte"], marks[0]["t"]);
    for (size_t i = 1; i < marks.size(); ++i) EXPECT_LE(marks[i - 1]["t"], marks[i]["t"]);
    const auto& heap = doc["memory"]["heap_after_disks"];
    EXPECT_EQ(heap["after_mark"], "cpus");
#if !defined(MVMM_SANITIZER_RUNTIME)  // the sanitizers' allocator leaves glibc's heap empty
    EXPECT_GT(heap["size_bytes"].get<uint64_t>(), 0u);
#endif
    EXPECT_GE(heap["t"], marks[2]["t"]);
    EXPECT_TRUE(doc["memory"]["heap_at_marks"].empty());
}

TEST(BootReport, ReadsTheHeapAndMallocAtTheEndOfTheWorkloadAndAtPoweroff) {
    BootReport report(TempPath("heap-marks"));
    type(report, "MVMM-MARK io 4.0 iops=9\nMVMM-MARK io-done 5.0\nMVMM-MARK poweroff 7.0\n");
    const auto doc = report.document(0);
    const auto& at = doc["memory"]["heap_at_marks"];
    ASSERT_EQ(at.size(), 2u) << at.dump();
    EXPECT_EQ(at["io-done"]["after_mark"], "io-done");
    EXPECT_LT(at["io-done"]["t"], at["poweroff"]["t"]);
#if !defined(MVMM_SANITIZER_RUNTIME)  // the sanitizers' allocator leaves glibc's heap empty
    if (rcu::malloc_totals()) {
        const auto in_use = at["poweroff"]["malloc_in_use_bytes"].get<uint64_t>();
        EXPECT_GT(in_use, 0u);
        EXPECT_LE(in_use, at["poweroff"]["malloc_bytes"].get<uint64_t>());
    }
#endif
}

TEST(BootReport, KeepsABoundedNumberOfMarks) {
    BootReport report(TempPath("bounded"));
    for (size_t i = 0; i < BootReport::kMaxMarks + 3; ++i) type(report, "MVMM-MARK m 1.0\n");
    const auto doc = report.document(0);
    EXPECT_EQ(doc["marks"].size(), BootReport::kMaxMarks);
    EXPECT_EQ(doc["marks_dropped"], 3);
}

TEST(BootReport, WithoutAMachineHasTheProcessFigures) {
    BootReport report(TempPath("no-machine"));
    report.stopping("--memory must be at least 64M");
    report.stopping("a later reason");
    const auto doc = report.document(2);
    EXPECT_EQ(doc["exit"]["code"], 2);
    EXPECT_EQ(doc["exit"]["reason"], "--memory must be at least 64M");
    EXPECT_GT(doc["memory"]["peak_rss_bytes"].get<uint64_t>(), 0u);
    EXPECT_TRUE(doc["memory"]["guest_resident_bytes"].is_null());
    EXPECT_TRUE(doc["vm_exits"].is_null());
    EXPECT_TRUE(doc["gsi_routing_pushes"].is_null());
    EXPECT_TRUE(doc["request_allocation"].is_null());
    EXPECT_TRUE(doc["disk_caches"].is_null());
}

ExitFigures machine_figures() {
    MachineFigures m;
    m.guest_resident_bytes = 64 << 20;
    m.mmio.rebuilds = 3;
    m.mmio.rebuild_time = std::chrono::microseconds(5);
    m.mmio.by_region = {{"pci ecam", 40}, {"pci 01:00.0 BAR4", 0}};
    m.pio.rebuilds = 2;
    m.pio.unclaimed = 7;
    m.pio.by_region = {{"com1", 100}};
    m.exits_by_kind = {{"io", 107}, {"mmio", 40}};
    m.gsi_routing_pushes = 9;
    m.request_alloc = SlotSource::pool;
    devices::virtio::DeviceStatistics disk;
    disk.driver_ok = process_start() + std::chrono::milliseconds(3);
    disk.queues = {{.queue = 0,
                    .request_alloc = SlotSource::pool,
                    .slots = 256,
                    .peak_slots_in_use = 3,
                    .pool_resident_bytes = 8192,
                    .heap_allocations = {}},
                   {.queue = 1,
                    .request_alloc = SlotSource::pool,
                    .slots = 128,
                    .peak_slots_in_use = 1,
                    .pool_resident_bytes = 4096,
                    .heap_allocations = {}}};
    m.devices = {{"disk 0 (a.img)", disk}, {"scsi c0 (2 LUNs)", {}}};
    devices::block::CacheStats overlay;
    overlay.l2 = {
        .entries = 3, .capacity = 64, .bytes_resident = 196608, .bytes_allocated = 4 << 20};
    overlay.refcount = {.entries = 1, .bytes_resident = 65536, .bytes_allocated = 262144};
    m.disk_caches = {{"a.qcow2", devices::block::ImageFormat::Qcow2, overlay},
                     {"b.img", devices::block::ImageFormat::Raw, {}}};
    ExitFigures f{read_process_figures(), m};
    f.process.status = {.vm_rss_bytes = 80 << 20, .vm_hwm_bytes = 100 << 20};
    rcu::TrimConfig adaptive;
    adaptive.policy = rcu::TrimPolicyKind::adaptive;
    adaptive.factor = 20;
    f.process.trim.policy_changes = 2;
    f.process.trim.recent_changes = {
        {process_start() + std::chrono::milliseconds(1), 1, {}},
        {process_start() + std::chrono::milliseconds(900), 42, adaptive}};
    return f;
}

TEST(BootReport, FiguresFromTheMachine) {
    BootReport report(TempPath("figures"));
    report.set_figures(machine_figures());
    const auto doc = report.document(0);
    EXPECT_EQ(doc["memory"]["vmm_peak_rss_bytes"], 36 << 20);
    EXPECT_EQ(doc["memory"]["vmm_rss_bytes"], 16 << 20);
    EXPECT_EQ(doc["vm_exits"]["total"], 147);
    EXPECT_EQ(doc["vm_exits"]["by_kind"]["io"], 107);
    EXPECT_EQ(doc["vm_exits"]["by_device"],
              (nlohmann::json{{"com1", 100}, {"pci ecam", 40}}));  // only devices that answered
    EXPECT_EQ(doc["vm_exits"]["unclaimed"]["pio"], 7);
    EXPECT_EQ(doc["address_spaces"]["mmio"]["rebuilds"], 3);
    EXPECT_EQ(doc["address_spaces"]["mmio"]["rebuild_ns"], 5000);
    EXPECT_EQ(doc["gsi_routing_pushes"], 9);
    EXPECT_EQ(doc["trim"]["policy_changes"],
              (nlohmann::json{
                  {{"at_ns", 1'000'000}, {"from_batch", 1}, {"policy", "drain"}, {"factor", 100.0}},
                  {{"at_ns", 900'000'000},
                   {"from_batch", 42},
                   {"policy", "adaptive"},
                   {"factor", 20.0}}}));
}

TEST(BootReport, RequestPoolsAndDeviceTimesFromTheMachine) {
    BootReport report(TempPath("pools"));
    report.set_figures(machine_figures());
    const auto doc = report.document(0);
    const auto& alloc = doc["request_allocation"];
    EXPECT_EQ(alloc["mode"], "pool");
    EXPECT_EQ(alloc["slots"], 384);
    EXPECT_EQ(alloc["peak_slots_in_use"], 4);
    EXPECT_EQ(alloc["pool_resident_bytes"], 12288);
    ASSERT_EQ(alloc["devices"].size(), 2u);
    const auto& queue1 = alloc["devices"][0]["queues"][1];
    EXPECT_EQ(queue1["queue"], 1);
    EXPECT_EQ(queue1["slots"], 128);
    EXPECT_TRUE(queue1["heap_allocations"].is_null());   // mvmm counts none
    EXPECT_TRUE(alloc["devices"][1]["queues"].empty());  // never activated
    const auto& devices = doc["timeline"]["devices"];
    ASSERT_EQ(devices.size(), 2u);
    EXPECT_EQ(devices[0]["name"], "disk 0 (a.img)");
    EXPECT_EQ(devices[0]["driver_ok"], 3'000'000);
    EXPECT_TRUE(devices[0]["first_notify"].is_null());
    EXPECT_TRUE(devices[1]["driver_ok"].is_null());
}

TEST(BootReport, DiskCachesPerImageAndTotals) {
    BootReport report(TempPath("caches"));
    report.set_figures(machine_figures());
    const auto caches = report.document(0)["disk_caches"];
    EXPECT_EQ(caches["resident_bytes"], 196608 + 65536);
    EXPECT_EQ(caches["allocated_bytes"], (4 << 20) + 262144);
    ASSERT_EQ(caches["images"].size(), 2u);
    const auto& overlay = caches["images"][0];
    EXPECT_EQ(overlay["path"], "a.qcow2");
    EXPECT_EQ(overlay["format"], "qcow2");
    EXPECT_EQ(overlay["l2"]["resident_bytes"], 196608);
    EXPECT_EQ(overlay["l2"]["allocated_bytes"], 4 << 20);
    EXPECT_EQ(overlay["l2"]["entries"], 3);
    EXPECT_EQ(overlay["l2"]["capacity"], 64);
    EXPECT_EQ(overlay["refcount"]["resident_bytes"], 65536);
    EXPECT_EQ(caches["images"][1]["format"], "raw");
    EXPECT_EQ(caches["images"][1]["l2"]["allocated_bytes"], 0);
}

TEST(BootReport, ExitStatsLineHasTheSameFigures) {
    const std::string line = exit_stats_line(machine_figures());
    for (const char* kv :
         {"peak_rss_kib=102400 ", "vmm_peak_rss_kib=36864 ", "gsi_routing_pushes=9 ",
          "vm_exits=147 ", "as_rebuilds=5 ", "as_rebuild_ns=5000"})
        EXPECT_NE(line.find(kv), std::string::npos) << kv << " not in " << line;
}

// Renaming or dropping a documented field breaks every tool that reads the report.
TEST(BootReport, DocumentedFieldNamesAreStable) {
    BootReport report(TempPath("fields"));
    report.set_figures(machine_figures());
    const auto doc = report.document(0);
    std::set<std::string> keys;
    for (const auto& [k, _] : doc.items()) keys.insert(k);
    EXPECT_EQ(keys, (std::set<std::string>{
                        "format", "version", "mvmm_version", "exit", "clock", "timeline", "marks",
                        "marks_dropped", "memory", "trim", "rcu", "address_spaces", "vm_exits",
                        "gsi_routing_pushes", "request_allocation", "disk_caches"}));
    std::set<std::string> events;
    for (const auto& [k, _] : doc["timeline"].items()) events.insert(k);
    EXPECT_EQ(events,
              (std::set<std::string>{"ram_ready", "devices_ready", "guest_loaded", "first_kvm_run",
                                     "first_serial_byte", "guest_stopped", "exit", "devices"}));
    for (const char* k :
         {"peak_rss_bytes", "rss_bytes", "guest_resident_bytes", "vmm_peak_rss_bytes",
          "vmm_rss_bytes", "heap_at_exit", "heap_after_disks", "heap_at_marks"})
        EXPECT_TRUE(doc["memory"].contains(k)) << k;
    for (const char* k :
         {"trims", "time_ns", "heap_bytes_released_per_trim", "rss_bytes_released_per_trim"})
        EXPECT_TRUE(doc["trim"]["by_policy"].contains(k)) << k;
    EXPECT_TRUE(doc["trim"]["policy_changes"].is_array());
    EXPECT_EQ(doc["format"], "mvmm-boot-report");
    EXPECT_EQ(doc["version"], 1);
}

TEST(BootReport, WritesTheDocumentWithItsExitTime) {
    const TempPath path("write");
    {
        BootReport report(path);
        report.stamp(BootEvent::GuestStopped);
        ASSERT_TRUE(report.write(4));
    }
    std::ifstream in(path.path);
    const auto doc = nlohmann::json::parse(in);
    EXPECT_EQ(doc["exit"]["code"], 4);
    EXPECT_GE(doc["timeline"]["exit"], doc["timeline"]["guest_stopped"]);
}

TEST(BootReport, AnUnwritablePathIsAUsageError) {
    EXPECT_THROW(BootReport("/nonexistent-dir/report.json"), UsageError);
}

TEST(VmExitCounts, NamesKinds) {
    VmExitCounts counts;
    counts.count(KVM_EXIT_IO);
    counts.count(KVM_EXIT_IO);
    counts.count(KVM_EXIT_MMIO);
    counts.count(33);
    counts.count(1000);
    using Kind = std::pair<std::string, uint64_t>;
    EXPECT_EQ(counts.by_kind(),
              (std::vector<Kind>{{"io", 2}, {"mmio", 1}, {"reason_33", 1}, {"other", 1}}));
}

}  // namespace
}  // namespace mvmm
