// SCSI sense data (SPC-4, 4.5): what a target says went wrong with a command.  Every condition
// this target reports is one named constant here, with its key, ASC/ASCQ and a message, so the
// value and what the log says about it are written once.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mvmm::devices::virtio::scsi {

enum class SenseKey : uint8_t {
    NoSense = 0x0,
    MediumError = 0x3,
    IllegalRequest = 0x5,
    UnitAttention = 0x6,
    DataProtect = 0x7,
    Miscompare = 0xe,
};

struct Sense {
    SenseKey key = SenseKey::NoSense;
    uint8_t asc = 0;   // additional sense code
    uint8_t ascq = 0;  // its qualifier
    std::string_view what;
    bool operator==(const Sense& other) const {
        return key == other.key && asc == other.asc && ascq == other.ascq;
    }
};

namespace sense {
inline constexpr Sense kNoSense{SenseKey::NoSense, 0x00, 0x00, "no sense"};
inline constexpr Sense kInvalidOpcode{SenseKey::IllegalRequest, 0x20, 0x00,
                                      "invalid command operation code"};
inline constexpr Sense kLbaOutOfRange{SenseKey::IllegalRequest, 0x21, 0x00,
                                      "logical block address out of range"};
inline constexpr Sense kInvalidFieldInCdb{SenseKey::IllegalRequest, 0x24, 0x00,
                                          "invalid field in CDB"};
inline constexpr Sense kLunNotSupported{SenseKey::IllegalRequest, 0x25, 0x00,
                                        "logical unit not supported"};
inline constexpr Sense kParameterListLength{SenseKey::IllegalRequest, 0x1a, 0x00,
                                            "parameter list length error"};
inline constexpr Sense kInvalidFieldInParameterList{SenseKey::IllegalRequest, 0x26, 0x00,
                                                    "invalid field in parameter list"};
inline constexpr Sense kSavingParametersNotSupported{SenseKey::IllegalRequest, 0x39, 0x00,
                                                     "saving parameters not supported"};
inline constexpr Sense kWriteProtected{SenseKey::DataProtect, 0x27, 0x00, "write protected"};
inline constexpr Sense kSpaceAllocationFailed{SenseKey::DataProtect, 0x27, 0x07,
                                              "space allocation failed write protect"};
inline constexpr Sense kMiscompareDuringVerify{SenseKey::Miscompare, 0x1d, 0x00,
                                               "miscompare during verify operation"};
inline constexpr Sense kPowerOnOrReset{SenseKey::UnitAttention, 0x29, 0x00,
                                       "power on, reset, or bus device reset occurred"};
inline constexpr Sense kCapacityDataChanged{SenseKey::UnitAttention, 0x2a, 0x09,
                                            "capacity data has changed"};
inline constexpr Sense kReportedLunsDataChanged{SenseKey::UnitAttention, 0x3f, 0x0e,
                                                "reported luns data has changed"};
inline constexpr Sense kReadError{SenseKey::MediumError, 0x11, 0x00, "unrecovered read error"};
inline constexpr Sense kWriteError{SenseKey::MediumError, 0x0c, 0x00, "write error"};
}  // namespace sense

inline constexpr size_t kFixedSenseBytes = 18;
inline constexpr size_t kDescriptorSenseBytes = 8;  // the header, no descriptors

// Fixed format (response code 70h), as targets return it with CHECK CONDITION.
std::array<uint8_t, kFixedSenseBytes> fixed_sense(const Sense& sense);
// Descriptor format (72h, no descriptors), for REQUEST SENSE with DESC set.
std::array<uint8_t, kDescriptorSenseBytes> descriptor_sense(const Sense& sense);

}  // namespace mvmm::devices::virtio::scsi
