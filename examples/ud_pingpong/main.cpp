// ud_pingpong: ibv_ud_pingpong on vfab's RDMA transport (examples/common/rdma_pingpong.hpp).
//
//   ud_pingpong -d 0000:00:02.0 --ip 10.77.0.1                       # server
//   ud_pingpong -d 0000:00:02.0 --ip 10.77.0.1 SERVER                # client
//   ibv_ud_pingpong -d rxe0 -g 1 SERVER                              # or rdma-core's, either side
#include "rdma_pingpong.hpp"

int main(int argc, char** argv) { return vfab::examples::pingpong_main(argc, argv, vfab::rdma::QpType::ud, 1024); }
