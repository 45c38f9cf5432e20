! Point-to-point through the shim's Fortran entry points (mpif.h style
! bindings through "use mpi"): blocking and nonblocking exchanges in a ring,
! statuses (source, tag, count), Waitany's 1-based index, Testall, persistent
! requests and Sendrecv_replace.  Host buffers: with MPCCL_SHIM_HOST=1 they
! take the device-buffer protocol.  Exit code 1 on a wrong value.
program test_shim_p2p_f
  use mpi
  implicit none
  integer, parameter :: n = 3001
  integer :: ierr, rank, nranks, left, right, i, it, cnt, idx, nbad, total
  integer :: st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 2), req(2)
  double precision :: a(n), b(n)
  logical :: flag

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  right = mod(rank + 1, nranks)
  left = mod(rank + nranks - 1, nranks)
  nbad = 0

  do i = 1, n
    a(i) = rank * 10000 + i
  end do

  ! Sendrecv in a ring: status names the left neighbour and the tag
  b = -1
  call MPI_Sendrecv(a, n, MPI_DOUBLE_PRECISION, right, 7, b, n, MPI_DOUBLE_PRECISION, left, 7, &
                    MPI_COMM_WORLD, st, ierr)
  call MPI_Get_count(st, MPI_DOUBLE_PRECISION, cnt, ierr)
  if (st(MPI_SOURCE) /= left .or. st(MPI_TAG) /= 7 .or. cnt /= n) nbad = nbad + 1
  do i = 1, n
    if (b(i) /= left * 10000 + i) nbad = nbad + 1
  end do

  ! Irecv + Isend + Waitany twice (indices count from 1)
  b = -1
  call MPI_Irecv(b, n, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, req(1), ierr)
  call MPI_Isend(a, n, MPI_DOUBLE_PRECISION, right, 9, MPI_COMM_WORLD, req(2), ierr)
  do it = 1, 2
    call MPI_Waitany(2, req, idx, st, ierr)
    if (idx < 1 .or. idx > 2) nbad = nbad + 1
    if (idx == 1) then
      call MPI_Get_count(st, MPI_DOUBLE_PRECISION, cnt, ierr)
      if (st(MPI_SOURCE) /= left .or. st(MPI_TAG) /= 9 .or. cnt /= n) nbad = nbad + 1
    end if
  end do
  if (req(1) /= MPI_REQUEST_NULL .or. req(2) /= MPI_REQUEST_NULL) nbad = nbad + 1
  do i = 1, n
    if (b(i) /= left * 10000 + i) nbad = nbad + 1
  end do

  ! Persistent requests, three rounds, completed with a Testall loop
  call MPI_Recv_init(b, n, MPI_DOUBLE_PRECISION, left, 11, MPI_COMM_WORLD, req(1), ierr)
  call MPI_Send_init(a, n, MPI_DOUBLE_PRECISION, right, 11, MPI_COMM_WORLD, req(2), ierr)
  do it = 1, 3
    do i = 1, n
      a(i) = rank * 10000 + i + it
    end do
    call MPI_Startall(2, req, ierr)
    flag = .false.
    do while (.not. flag)
      call MPI_Testall(2, req, flag, sts, ierr)
    end do
    do i = 1, n
      if (b(i) /= left * 10000 + i + it) nbad = nbad + 1
    end do
  end do
  call MPI_Request_free(req(1), ierr)
  call MPI_Request_free(req(2), ierr)

  ! Sendrecv_replace: the buffer comes back holding the left neighbour's data
  do i = 1, n
    b(i) = rank * 10000 + i
  end do
  call MPI_Sendrecv_replace(b, n, MPI_DOUBLE_PRECISION, right, 13, left, 13, MPI_COMM_WORLD, st, ierr)
  do i = 1, n
    if (b(i) /= left * 10000 + i) nbad = nbad + 1
  end do

  call MPI_Allreduce(nbad, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a)', 'test_shim_p2p_f: ', total, ' wrong values'
  call MPI_Finalize(ierr)
  if (total /= 0) stop 1
end program test_shim_p2p_f
