! The Fortran (mpif.h) entry points of libmpccl_shim.so: each intercepted
! collective once, with MPI_IN_PLACE where MPI allows it, checked against
! values computed here.  Exits with status 1 on a wrong result.
program test_shim_f
    implicit none
    include 'mpif.h'
    integer, parameter :: n = 37
    integer :: ierr, me, np, i, r, bad, root, req, pos
    double precision :: a(n), b(n), want
    integer, allocatable :: s(:), g(:), cnt(:), dsp(:)

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, me, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
    bad = 0
    root = np - 1
    allocate(s(n * np), g(n * np), cnt(np), dsp(np))

    ! allreduce, out of place and in place; iallreduce
    do i = 1, n
        a(i) = dble(me + 1) * i
    end do
    call MPI_Allreduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check_sum(b, 'allreduce')
    b = a
    call MPI_Allreduce(MPI_IN_PLACE, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check_sum(b, 'allreduce in place')
    call MPI_Iallreduce(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, req, ierr)
    call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
    call check_sum(b, 'iallreduce')

    ! scan: rank r holds (r + 1) * i, so rank me gets (me + 1)(me + 2)/2 * i
    call MPI_Scan(a, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    do i = 1, n
        if (b(i) /= dble((me + 1) * (me + 2) / 2) * i) then
            call fail('scan')
            exit
        end if
    end do

    ! reduce to the last rank, in place there
    b = a
    if (me == root) then
        call MPI_Reduce(MPI_IN_PLACE, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, root, MPI_COMM_WORLD, ierr)
        call check_sum(b, 'reduce in place')
    else
        call MPI_Reduce(b, b, n, MPI_DOUBLE_PRECISION, MPI_SUM, root, MPI_COMM_WORLD, ierr)
    end if

    ! reduce_scatter_block / reduce_scatter of integers: element j is j + rank
    do i = 1, n * np
        s(i) = i + me
    end do
    g = -1
    call MPI_Reduce_scatter_block(s, g, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    do i = 1, n
        if (g(i) /= np * (me * n + i) + np * (np - 1) / 2) call fail('reduce_scatter_block')
    end do
    cnt = n
    g = -1
    call MPI_Reduce_scatter(s, g, cnt, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
    do i = 1, n
        if (g(i) /= me * n + i + np - 1) call fail('reduce_scatter')
    end do

    ! bcast from root; allgather in place; gather; scatter; alltoall
    s = me
    call MPI_Bcast(s, n, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    if (any(s(1:n) /= root)) call fail('bcast')
    g = -1
    g(me * n + 1:me * n + n) = me
    call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do r = 0, np - 1
        if (any(g(r * n + 1:r * n + n) /= r)) call fail('allgather in place')
    end do
    ! allgatherv: rank r sends r + 1 integers; blocks in reverse rank order, gaps of 1
    do r = 0, np - 1
        cnt(r + 1) = r + 1
    end do
    pos = 0
    do r = np - 1, 0, -1
        dsp(r + 1) = pos
        pos = pos + cnt(r + 1) + 1
    end do
    s(1:me + 1) = me * 10 + 7
    g = -1
    call MPI_Allgatherv(s, me + 1, MPI_INTEGER, g, cnt, dsp, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do r = 0, np - 1
        if (any(g(dsp(r + 1) + 1:dsp(r + 1) + cnt(r + 1)) /= r * 10 + 7)) call fail('allgatherv')
        if (g(dsp(r + 1) + cnt(r + 1) + 1) /= -1) call fail('allgatherv gap')
    end do
    s(1:n) = me + 100
    g = -1
    call MPI_Gather(s, n, MPI_INTEGER, g, n, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    if (me == root) then
        do r = 0, np - 1
            if (any(g(r * n + 1:r * n + n) /= r + 100)) call fail('gather')
        end do
    end if
    do i = 1, n * np
        s(i) = (i - 1) / n * 1000 + me
    end do
    g = -1
    call MPI_Scatter(s, n, MPI_INTEGER, g, n, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    if (any(g(1:n) /= me * 1000 + root)) call fail('scatter')
    g = -1
    call MPI_Alltoall(s, n, MPI_INTEGER, g, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do r = 0, np - 1
        if (any(g(r * n + 1:r * n + n) /= me * 1000 + r)) call fail('alltoall')
    end do

    call MPI_Allreduce(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (me == 0) print '(a, i0, a)', 'test_shim_f: ', bad, ' failures'
    deallocate(s, g, cnt, dsp)  ! (a leak to a leak checker otherwise)
    call MPI_Finalize(ierr)
    if (bad /= 0) stop 1

contains

    subroutine check_sum(x, what)
        double precision, intent(in) :: x(n)
        character(*), intent(in) :: what
        integer :: k
        do k = 1, n
            want = dble(np * (np + 1) / 2) * k
            if (x(k) /= want) then
                call fail(what)
                return
            end if
        end do
    end subroutine

    subroutine fail(what)
        character(*), intent(in) :: what
        print '(a, i0, 2a)', 'rank ', me, ': FAIL ', what
        bad = bad + 1
    end subroutine
end program
