#include "devices/virtio/scsi/request.h"

#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>

#include <cstring>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr size_t kRequestBytes = sizeof(virtio_scsi_cmd_req);    // with a 32-byte CDB
constexpr size_t kResponseBytes = sizeof(virtio_scsi_cmd_resp);  // with 96 bytes of sense

// A chain over host memory: `readable` then `writable` bytes, in the parts given.
class Chain {
  public:
    Chain(std::vector<size_t> readable, std::vector<size_t> writable) {
        for (size_t n : readable) readable_.push_back(part(n));
        for (size_t n : writable) writable_.push_back(part(n));
        chain_.readable = GuestBuffers(readable_);
        chain_.writable = GuestBuffers(writable_);
    }
    const DescriptorChain& get() const { return chain_; }
    void set_header(std::array<uint8_t, 8> lun, std::initializer_list<uint8_t> cdb) {
        virtio_scsi_cmd_req request{};
        std::memcpy(request.lun, lun.data(), 8);
        std::copy(cdb.begin(), cdb.end(), request.cdb);
        chain_.readable.copy_from(0,
                                  std::span(reinterpret_cast<uint8_t*>(&request), sizeof request));
    }
    virtio_scsi_cmd_resp response() const {
        virtio_scsi_cmd_resp response{};
        chain_.writable.copy_to(0, std::span(reinterpret_cast<uint8_t*>(&response),
                                             std::min(sizeof response, chain_.writable.size())));
        return response;
    }

  private:
    GuestSlice part(size_t n) {
        parts_.push_back(std::make_unique<std::vector<uint8_t>>(n, 0));
        return GuestSlice(*parts_.back());
    }
    std::vector<std::unique_ptr<std::vector<uint8_t>>> parts_;
    std::vector<GuestBuffers::Part> readable_, writable_;
    DescriptorChain chain_;
};

TEST(ParseCommand, SplitsHeaderDataAndResponseAnywhere) {
    Chain chain({10, kRequestBytes - 10 + 512}, {kResponseBytes - 8, 8});
    chain.set_header({1, 0, 0x40, 7}, {0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0});
    auto request = parse_command(chain.get(), Layout{});
    ASSERT_TRUE(request);
    EXPECT_EQ(request->cdb().size(), 32u);
    EXPECT_EQ(request->cdb()[0], 0x2a);
    EXPECT_EQ(request->data_out.size(), 512u);
    EXPECT_EQ(request->response.size(), kResponseBytes);
    EXPECT_TRUE(request->data_in.empty());
    EXPECT_EQ(lun_address(request->lun), (LunAddress{0, 7}));
}

TEST(ParseCommand, FollowsTheDriversCdbAndSenseSizes) {
    Chain chain({19 + 16}, {12 + 18 + 4096});
    auto request = parse_command(chain.get(), Layout{.cdb_size = 16, .sense_size = 18});
    ASSERT_TRUE(request);
    EXPECT_EQ(request->cdb().size(), 16u);
    EXPECT_EQ(request->data_in.size(), 4096u);
    Chain huge_cdb({19 + 200}, {kResponseBytes});
    auto clipped = parse_command(huge_cdb.get(), Layout{.cdb_size = 200, .sense_size = 96});
    ASSERT_TRUE(clipped);
    EXPECT_EQ(clipped->cdb().size(), 32u) << "only the bytes a CDB can use are kept";
}

TEST(ParseCommand, RefusesBrokenFraming) {
    EXPECT_EQ(parse_command(Chain({kRequestBytes - 1}, {kResponseBytes}).get(), Layout{}).error(),
              FramingError::HeaderTooShort);
    EXPECT_EQ(parse_command(Chain({kRequestBytes}, {kResponseBytes - 1}).get(), Layout{}).error(),
              FramingError::NoRoomForResponse);
    EXPECT_EQ(
        parse_command(Chain({kRequestBytes + 1}, {kResponseBytes + 1}).get(), Layout{}).error(),
        FramingError::Bidirectional);
    const Layout huge{.cdb_size = 0xffff'ffff, .sense_size = 0xffff'ffff};
    EXPECT_EQ(parse_command(Chain({kRequestBytes}, {kResponseBytes}).get(), huge).error(),
              FramingError::HeaderTooShort)
        << "sizes near 4 GiB do not wrap";
}

TEST(LunAddress, AnyTargetSingleLevelOnly) {
    using Lun = std::array<uint8_t, 8>;
    EXPECT_EQ(lun_address(Lun{1, 0, 0x40, 0}), (LunAddress{0, 0}));
    EXPECT_EQ(lun_address(Lun{1, 0, 0, 5}), (LunAddress{0, 5})) << "peripheral addressing";
    EXPECT_EQ(lun_address(Lun{1, 0, 0x7f, 0xff}), (LunAddress{0, 16383}));
    EXPECT_EQ(lun_address(Lun{1, 1, 0x40, 0}), (LunAddress{1, 0})) << "target 1";
    EXPECT_EQ(lun_address(Lun{1, 255, 0, 9}), (LunAddress{255, 9})) << "target 255";
    EXPECT_FALSE(lun_address(Lun{0, 0, 0x40, 0}));
    EXPECT_FALSE(lun_address(Lun{1, 0, 0x80, 0})) << "logical unit addressing";
    EXPECT_FALSE(lun_address(Lun{1, 0, 0x01, 0})) << "peripheral with a bus number";
    EXPECT_FALSE(lun_address(Lun{1, 0, 0x40, 0, 0x40, 1})) << "a second level";
}

TEST(WriteResponse, CheckConditionCarriesFixedSenseCutToSenseSize) {
    Chain chain({kRequestBytes}, {kResponseBytes + 512});
    auto request = parse_command(chain.get(), Layout{});
    ASSERT_TRUE(request);
    const uint32_t used = write_response(
        *request, Layout{}, {.response = 0, .sense = sense::kLbaOutOfRange, .residual = 512}, 0);
    EXPECT_EQ(used, kResponseBytes);
    const auto response = chain.response();
    EXPECT_EQ(response.status, 2) << "CHECK CONDITION";
    EXPECT_EQ(response.sense_len, 18u);
    EXPECT_EQ(response.resid, 512u);
    EXPECT_EQ(response.sense[0], 0x70);
    EXPECT_EQ(response.sense[12], 0x21);

    Chain small({19 + 32}, {12 + 8});
    auto cut = parse_command(small.get(), Layout{.cdb_size = 32, .sense_size = 8});
    ASSERT_TRUE(cut);
    write_response(*cut, Layout{.cdb_size = 32, .sense_size = 8},
                   {.response = 0, .sense = sense::kLbaOutOfRange, .residual = 0}, 0);
    EXPECT_EQ(small.response().sense_len, 8u);
}

TEST(WriteFailure, OnlyWhenThereIsRoom) {
    Chain roomy({4}, {12});
    EXPECT_EQ(write_failure(roomy.get()), 12u);
    EXPECT_EQ(roomy.response().response, VIRTIO_SCSI_S_FAILURE);
    EXPECT_EQ(write_failure(Chain({4}, {11}).get()), 0u);
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi
