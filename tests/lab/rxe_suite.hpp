// A GoogleTest suite with the kernel's rxe as the peer (RxePeer: rxe0 on 0000:00:03.0 as
// 10.77.0.2), started once for the suite and stopped after it; its tests skip outside the
// lab and on the iommufd kernel, which has no rxe.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lab_env.hpp"
#include "rxe_peer.hpp"

namespace vfab::lab {

class RxeSuite : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!in_lab() || flavor() != "debian") return;
        peer_ = new RxePeer();
        error_ = peer_->start();
    }
    static void TearDownTestSuite() {
        if (peer_) {
            const std::string e = peer_->stop();
            EXPECT_TRUE(e.empty()) << e;
        }
        delete peer_;
        peer_ = nullptr;
    }
    void SetUp() override {
        if (!in_lab()) GTEST_SKIP() << "needs the lab (scripts/lab)";
        if (flavor() != "debian") GTEST_SKIP() << "the kernel's rxe is in the debian lab kernel only";
        ASSERT_TRUE(error_.empty()) << error_;
    }
    inline static RxePeer* peer_ = nullptr;
    inline static std::string error_;
};

}  // namespace vfab::lab
